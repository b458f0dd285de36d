package iptables

import (
	"cmp"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// tablePriority is where each table's base chains sit on their hooks (iptables-nft registers them at the
// same priorities as the legacy tables).
func tablePriority(table string, hook netfilter.Hook) int {
	switch table {
	case "raw":
		return netfilter.PriorityRaw
	case "mangle":
		return netfilter.PriorityMangle
	case "nat":
		if hook == netfilter.Prerouting || hook == netfilter.Output {
			return netfilter.PriorityDstNAT
		}
		return netfilter.PrioritySrcNAT
	case "security":
		return 50
	}
	return netfilter.PriorityFilter
}

// BaseChains attaches every table's built-in chains to their hooks.
func (r *Rules) BaseChains() []netfilter.BaseChain {
	var out []netfilter.BaseChain
	for _, tname := range []string{"raw", "mangle", "nat", "filter", "security"} {
		t, ok := r.Tables[tname]
		if !ok {
			continue
		}
		for _, cname := range builtins[tname] {
			c, ok := t.Chains[cname]
			// iptables-nft creates a built-in chain in the kernel only when it gets a rule, so an empty
			// ACCEPT chain is never traversed (and never traced); legacy's would accept silently anyway.
			if !ok || len(c.Rules) == 0 && c.Policy != "DROP" {
				continue
			}
			hook := netfilter.Hook(cname)
			t, c := t, c
			bc := netfilter.BaseChain{
				Hook: hook, Priority: tablePriority(tname, hook), Table: tname, Name: cname, NAT: tname == "nat",
				Created: r.Created[tname+"/"+cname],
				Run:     func(w *netfilter.Walk) netfilter.Verdict { return r.run(w, t, c) },
			}
			if !bc.Created.Known() {
				bc.OrderUnknown = cmp.Or(r.OrderUnknown, "iptables-save does not show when a chain was made")
			}
			out = append(out, bc)
		}
	}
	return out
}

type frame struct {
	chain *Chain
	next  int    // index of the next rule to evaluate
	from  string // where the rule that jumped here is ("KUBE-EXT-… rule 1"); "" for the base chain
	// via are the chains a goto left to reach chain, in order: the walk is still inside them (a RETURN goes
	// back past them), so a jump to one of them is a loop too.
	via []string
}

// maxDepth bounds how deep jumps nest. iptables-nft (nf_tables) refuses more than 16; iptables-legacy has no
// fixed limit but refuses loops, so its depth is at most its chains. kube-proxy's rules nest 4 deep; 64 is far
// past any real ruleset, and bounds a walk of a crafted one.
const maxDepth = 64

// inside are the chains a walk is in, outermost first: each frame's goto trail and chain.
func inside(stack []frame) []string {
	var out []string
	for _, f := range stack {
		out = append(append(out, f.via...), f.chain.Name)
	}
	return out
}

// RuleCount is the number of rules in every table (netfilter.Sized: it bounds the walk's work).
func (r *Rules) RuleCount() int {
	if r.ruleCount > 0 {
		return r.ruleCount
	}
	n := 0
	for _, t := range r.Tables {
		for _, c := range t.Chains {
			n += len(c.Rules)
		}
	}
	r.ruleCount = n
	return n
}

// run walks a base chain and whatever it jumps to, recording each rule evaluated.
func (r *Rules) run(w *netfilter.Walk, t *Table, base *Chain) netfilter.Verdict {
	stack := []frame{{chain: base}}
	for len(stack) > 0 {
		if !w.Step() {
			return netfilter.Unknown
		}
		f := &stack[len(stack)-1]
		if f.next >= len(f.chain.Rules) && f.chain.Cut {
			w.Missing("the rest of %s/%s: the input ends inside table %s (no COMMIT: cut?)", t.Name, f.chain.Name, t.Name)
			return netfilter.Unknown
		}
		if f.next >= len(f.chain.Rules) {
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				policy := base.Policy
				if policy == "" {
					policy = "ACCEPT"
				}
				h := trace.Hop{Table: t.Name, Chain: base.Name, Text: "policy " + policy, Matched: true, Verdict: "policy " + strings.ToLower(policy)}
				w.Add(h)
				if policy == "DROP" {
					w.VerdictBy(h)
					return netfilter.Drop
				}
				return netfilter.Accept
			}
			continue
		}
		idx := f.next
		rule := f.chain.Rules[idx]
		f.next++
		if rule.Elided {
			w.Add(trace.Hop{Table: t.Name, Chain: f.chain.Name, Rule: idx + 1, Text: rule.Text, Reason: "the paste left rules out here"})
			w.Missing("the rules the paste left out of %s/%s where it says %q (before its rule %d as pasted)", t.Name, f.chain.Name, rule.Text, idx+1)
			return netfilter.Unknown
		}
		if c := rule.matcher(); w.Quiet && ((c.dst.IsValid() && !c.dst.Contains(w.Pkt.Dst)) || (c.dport != 0 && c.dport != w.Pkt.Dport)) {
			continue // cannot match, and a quiet walk gives no account of what did not
		}
		// A copy per evaluation: the notes it gathers are this walk's, the compiled rule stays as it was.
		eval := *rule.matcher()
		m := &eval
		h := trace.Hop{Table: t.Name, Chain: f.chain.Name, Rule: idx + 1, Text: rule.Text, Service: m.service}
		chain, caller := f.chain, f.from
		add := func() {
			stamp(&h, t.Name, chain, m)
			w.Add(h)
		}
		matched, reason, prob := m.evaluate(w)
		h.Matched, h.Reason, h.Probability = matched, reason, prob
		if m.unknown != "" && (m.target == "MASQUERADE" || m.target == "SNAT") {
			// Whether this rule rewrites the source is not known; where the packet goes is: the walk goes on,
			// and the source the endpoint sees is unknown, with the reason.
			add()
			w.SourceUnknown(fmt.Sprintf("the source the endpoint sees: %s/%s rule %d may %s it, and whether it matches needs %s", t.Name, f.chain.Name, idx+1, strings.ToLower(m.target), m.unknown))
			continue
		}
		if m.unknown != "" {
			add()
			w.Missing("%s (%s/%s rule %d)", m.unknown, t.Name, f.chain.Name, idx+1)
			return netfilter.Unknown
		}
		if rule.Assumed {
			w.Note("the input did not contain %s/%s; the trace assumes kube-proxy's usual rules there", t.Name, f.chain.Name)
		}
		if !matched {
			if !w.Quiet {
				add()
			}
			continue
		}
		for _, n := range m.notes {
			w.Note("%s", n)
		}
		if _, ok := m.first("recent", "--rcheck"); ok {
			w.Affinity(h) // kube-proxy's KUBE-SVC rule for a client in an endpoint's recent list
		}
		switch tg := m.target; tg {
		case "":
			h.Verdict = "continue"
			add()
		case "ACCEPT":
			h.Verdict = "accept"
			add()
			return netfilter.Accept
		case "DROP":
			h.Verdict = "drop"
			add()
			w.VerdictBy(h)
			return netfilter.Drop
		case "REJECT":
			h.Verdict = "reject"
			if v := m.targetOpt("--reject-with"); v != "" {
				h.Verdict += " with " + v
			}
			add()
			w.VerdictBy(h)
			return netfilter.Reject
		case "RETURN":
			h.Verdict = "return"
			add()
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				// RETURN from a base chain applies its policy.
				policy := base.Policy
				if policy == "" {
					policy = "ACCEPT"
				}
				if policy == "DROP" {
					w.VerdictBy(h)
					return netfilter.Drop
				}
				return netfilter.Accept
			}
		case "DNAT":
			to, err := parseNATDestination(m.targetOpt("--to-destination"), w.Pkt.Dport)
			if err != nil {
				h.Verdict = "dnat (unreadable destination)"
				w.Note("rule %s/%s #%d: %v", t.Name, f.chain.Name, idx+1, err)
				add()
				return netfilter.Accept
			}
			h.Changes = append(h.Changes, w.DNAT(to))
			h.Verdict = "dnat to " + to.String()
			add()
			return netfilter.Accept
		case "SNAT":
			to, err := parseNATDestination(m.targetOpt("--to-source"), 0)
			if err != nil {
				w.Note("rule %s/%s #%d: %v", t.Name, f.chain.Name, idx+1, err)
				add()
				return netfilter.Accept
			}
			h.Changes = append(h.Changes, w.SNAT(to.Addr()))
			h.Verdict = "snat to " + to.Addr().String()
			add()
			return netfilter.Accept
		case "MASQUERADE":
			random := m.hasTargetFlag("--random-fully") || m.hasTargetFlag("--random")
			how := "MASQUERADE"
			if m.hasTargetFlag("--random-fully") {
				how += " --random-fully"
			} else if m.hasTargetFlag("--random") {
				how += " --random"
			}
			h.Changes = append(h.Changes, w.Masquerade(how, random))
			h.Verdict = "masquerade to " + w.MasqueradedTo()
			if random {
				h.Changes = append(h.Changes, fmt.Sprintf("source port chosen at random (%s)", strings.TrimPrefix(how, "MASQUERADE ")))
			}
			add()
			return netfilter.Accept
		case "REDIRECT":
			// To the node itself: the first address of the interface the packet came in on (127.0.0.1 for
			// one the node makes), the port --to-ports names or its own (Istio's sidecar capture, for one).
			port := w.Pkt.Dport
			if v := m.targetOpt("--to-ports"); v != "" {
				first, _, _ := strings.Cut(v, "-")
				n, err := strconv.ParseUint(first, 10, 16)
				if err != nil {
					w.Note("rule %s/%s #%d: --to-ports %q is not a port", t.Name, f.chain.Name, idx+1, v)
				} else {
					port = uint16(n)
				}
			}
			to := w.RedirectAddr()
			if !to.IsValid() {
				// Which of the node's addresses is not said; that it is the node's is: the walk goes on with the
				// packet's own destination, and says so.
				to = w.Pkt.Dst
				w.Note("assumed: REDIRECT (%s/%s rule %d) sends the packet to the first address of %s, which the input does not give; the trace keeps %s (--local-addresses tells)", t.Name, f.chain.Name, idx+1, orNone(w.Pkt.Iif), to)
			}
			h.Changes = append(h.Changes, w.Redirect(netip.AddrPortFrom(to, port)))
			h.Verdict = "redirect to " + netip.AddrPortFrom(to, port).String()
			add()
			return netfilter.Accept
		case "MARK":
			mark, err := applyMark(w.Pkt.Mark, m.targetArgs)
			if err != nil {
				w.Note("rule %s/%s #%d: %v", t.Name, f.chain.Name, idx+1, err)
			} else {
				stampMark(&h, w.Pkt.Mark, mark, caller)
				h.Changes = append(h.Changes, w.SetMark(mark))
			}
			h.Verdict = "continue"
			add()
		case "LOG", "NFLOG", "TRACE", "CT", "NOTRACK", "CONNMARK", "CHECKSUM", "TCPMSS", "NFQUEUE", "AUDIT":
			h.Verdict = "continue (" + strings.ToLower(tg) + ")"
			if tg == "NFQUEUE" {
				w.Note("an NFQUEUE rule hands the packet to user space; the trace assumes it is accepted")
			}
			add()
		default:
			next, ok := t.Chains[tg]
			if !ok && r.scope != nil {
				next = r.readChain(w, r.scope, t, tg)
				ok = next != nil
			}
			if !ok {
				// The kernel loads no rule whose target is missing: the dump is a part of the node's rules, and
				// what that chain does is not in it.
				verb, does := "jump", "jumps"
				if m.isGoto {
					verb, does = "goto", "goes"
				}
				if strings.ToUpper(tg) == tg && !strings.ContainsAny(tg, "-_") {
					// An extension target (TPROXY, CLASSIFY, …), not a chain.
					h.Verdict = strings.ToLower(tg) + " (not modelled)"
					add()
					w.Missing("what target %s does (%s/%s rule %d): k8sguide does not model it", tg, t.Name, f.chain.Name, idx+1)
					return netfilter.Unknown
				}
				if r.Scope != "" {
					// Read chain by chain for one packet (collectScoped): this chain was not read.
					r.unread(t.Name + "/" + tg)
					h.Verdict = verb + " " + tg + " (chain not read)"
					add()
					w.Missing("chain %s/%s (%s/%s rule %d %s to it): the node's rules were read only as far as the walk of %s reached", t.Name, tg, t.Name, f.chain.Name, idx+1, does, r.Scope)
					return netfilter.Unknown
				}
				h.Verdict = verb + " " + tg + " (chain not in the input)"
				add()
				w.Missing("chain %s/%s (%s/%s rule %d %s to it; the input does not have it)", t.Name, tg, t.Name, f.chain.Name, idx+1, does)
				return netfilter.Unknown
			}
			if strings.HasPrefix(tg, "KUBE-SVL-") {
				w.LocalEndpoints(h) // kube-proxy's chain of a Service's endpoints on this node
			}
			// The load-time check refuses rules that loop; the walk stops one itself wherever it is bypassed.
			if w.Loop(t.Name, tg, inside(stack)) {
				h.Verdict = map[bool]string{true: "goto ", false: "jump "}[m.isGoto] + tg + " (a loop)"
				add()
				return netfilter.Unknown
			}
			if m.isGoto {
				h.Verdict = "goto " + tg
				top := stack[len(stack)-1]
				stack[len(stack)-1] = frame{chain: next, from: h.Where(), via: append(slices.Clip(top.via), top.chain.Name)}
			} else {
				if w.TooDeep(t.Name, f.chain.Name, len(stack), maxDepth) {
					h.Verdict = "jump " + tg + " (too deep)"
					add()
					return netfilter.Unknown
				}
				h.Verdict = "jump " + tg
				stack = append(stack, frame{chain: next, from: h.Where()})
			}
			add()
		}
	}
	return netfilter.Accept
}

func parseNATDestination(s string, port uint16) (netip.AddrPort, error) {
	if s == "" {
		return netip.AddrPort{}, fmt.Errorf("no address given")
	}
	host, p, hasPort := s, "", false
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		host, p, hasPort = s[:i], s[i+1:], true
	}
	host, _, _ = strings.Cut(host, "-") // a range: the first address (kube-proxy never writes ranges)
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("address %q: %v", s, err)
	}
	if hasPort {
		p, _, _ = strings.Cut(p, "-")
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("port in %q: %v", s, err)
		}
		port = uint16(n)
	}
	return netip.AddrPortFrom(a, port), nil
}

func parseMark(s string) (v, mask uint32, err error) {
	vs, ms, hasMask := strings.Cut(s, "/")
	v64, err := strconv.ParseUint(vs, 0, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("mark %q: %v", s, err)
	}
	mask = math.MaxUint32
	if hasMask {
		m64, err := strconv.ParseUint(ms, 0, 32)
		if err != nil {
			return 0, 0, fmt.Errorf("mark mask %q: %v", s, err)
		}
		mask = uint32(m64)
	}
	return uint32(v64), mask, nil
}

// applyMark computes the MARK target's new mark, as xt_MARK does.
func applyMark(mark uint32, args []string) (uint32, error) {
	for i := 0; i+1 < len(args); i++ {
		v, m, err := parseMark(args[i+1])
		if err != nil {
			return mark, err
		}
		switch args[i] {
		case "--set-xmark":
			return (mark &^ m) ^ v, nil
		case "--set-mark":
			return (mark &^ m) | v, nil
		case "--or-mark":
			return mark | v, nil
		case "--and-mark":
			return mark & v, nil
		case "--xor-mark":
			return mark ^ v, nil
		}
	}
	return mark, fmt.Errorf("MARK without a mark operation")
}
