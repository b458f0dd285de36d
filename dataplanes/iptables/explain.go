package iptables

import (
	"fmt"
	"slices"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// This file is the iptables engine's explanation face: the stage each hop of kube-proxy's chains does, stamped
// as the walk makes the hop (stamp), and the guide's sentences for them. The guide walks these very chains
// (KUBE-SERVICES, KUBE-NODEPORTS, KUBE-SVC, KUBE-SEP, KUBE-MARK-MASQ, KUBE-POSTROUTING); the sentences say where
// the rules a trace met differ from it. IPVS mode's chains (KUBE-NODE-PORT, the ipsets) are walked here too.

// What the iptables engine's parts mean (trace.Part.Means).
const (
	meansNodePort = "nodeport" // the match sends the packet on by its NodePort (KUBE-NODEPORTS, KUBE-NODE-PORT)
	meansExternal = "external" // the Service chain is reached through KUBE-EXT (Kubernetes 1.25 and later)
	meansLocal    = "local"    // a traffic policy of Local: KUBE-SVL (KUBE-XLB before 1.25), this node's endpoints
	meansCascade  = "cascade"  // one of the KUBE-SVC chain's statistic --mode random rules
	meansOnly     = "only"     // the Service chain's one endpoint rule
	meansSEP      = "sep"      // the endpoint's KUBE-SEP chain DNATs
)

// serviceChain says whether a chain is a Service's own, where the endpoint is chosen: KUBE-SVC-…, and with a
// traffic policy of Local the chain of this node's endpoints, KUBE-SVL-… (KUBE-XLB-… before Kubernetes 1.25).
func serviceChain(c string) bool {
	return strings.HasPrefix(c, "KUBE-SVC-") || strings.HasPrefix(c, "KUBE-SVL-") || strings.HasPrefix(c, "KUBE-XLB-")
}

// dispatchChain says whether a chain dispatches packets to Services by address and port: KUBE-SERVICES,
// KUBE-NODEPORTS and IPVS mode's KUBE-NODE-PORT.
func dispatchChain(c string) bool {
	return c == "KUBE-SERVICES" || c == "KUBE-NODEPORTS" || c == "KUBE-NODE-PORT"
}

// keys are what a dispatching rule matches on, in its own words: "addrtype LOCAL", "-d 10.96.0.10/32",
// "--dport 31758", "ipset KUBE-NODE-PORT-TCP".
func (m *matcher) keys() []string {
	var out []string
	if c, ok := m.first("addrtype", "--dst-type"); ok && !c.neg && len(c.vals) > 0 {
		out = append(out, "addrtype "+c.vals[0])
	}
	for _, c := range m.conds {
		if c.module == "" && c.opt == "-d" && !c.neg && len(c.vals) > 0 {
			out = append(out, "-d "+c.vals[0])
		}
	}
	for _, c := range m.conds {
		if c.opt == "--dport" && !c.neg && len(c.vals) > 0 {
			out = append(out, "--dport "+c.vals[0])
			break
		}
	}
	if c, ok := m.first("set", "--match-set"); ok && len(c.vals) > 0 {
		out = append(out, "ipset "+c.vals[0])
	}
	return out
}

// stamp marks a hop of the nat table's Service chains with the stage it does, once the walk knows its result;
// chain is the hop's chain.
func stamp(h *trace.Hop, table string, chain *Chain, m *matcher) {
	if table != "nat" {
		return
	}
	tg := m.target
	target, _ := strings.CutPrefix(h.Verdict, "jump ")
	if t, ok := strings.CutPrefix(h.Verdict, "goto "); ok {
		target = t
	}
	switch {
	case !h.Matched && serviceChain(h.Chain) && strings.HasPrefix(tg, "KUBE-SEP-") && h.Probability > 0:
		// A cascade rule this path passed by: its stored chance belongs to how the choice is made.
		h.Does(trace.StageChoice, "", meansCascade)
		return
	case !h.Matched:
		return
	}
	if dispatchChain(h.Chain) && (tg != "KUBE-MARK-MASQ" || h.Chain == "KUBE-NODE-PORT") && tg != "KUBE-MARK-DROP" &&
		(target != h.Verdict || h.Verdict == "accept") {
		// IPVS mode's KUBE-NODE-PORT matches the NodePort (its ipset) in the very rule that asks for the mark.
		says := h.Where()
		if k := m.keys(); len(k) > 0 {
			says += " (" + strings.Join(k, ", ") + ")"
		}
		says += " → " + strings.TrimPrefix(strings.TrimPrefix(h.Verdict, "jump "), "goto ")
		means := ""
		if tg == "KUBE-NODEPORTS" || h.Chain == "KUBE-NODE-PORT" {
			means = meansNodePort
		}
		h.Does(trace.StageMatch, says, means)
	}
	if serviceChain(target) {
		means := ""
		switch {
		case !strings.HasPrefix(target, "KUBE-SVC-"):
			means = meansLocal
		case strings.HasPrefix(h.Chain, "KUBE-EXT-"):
			means = meansExternal
		}
		h.Does(trace.StageService, h.Where()+" → "+target, means)
	}
	switch {
	case serviceChain(h.Chain) && strings.HasPrefix(target, "KUBE-SEP-"):
		if _, ok := m.first("recent", "--rcheck"); ok {
			h.Does(trace.StageChoice, "session affinity: "+h.Ref()+" → "+target+" (this client's entry)", trace.MeansAffinity)
			break
		}
		says := fmt.Sprintf("rule %d → %s", h.Rule, target)
		means := meansCascade
		if h.Probability == 0 && endpointRules(chain) == 1 {
			says += " (the only endpoint)"
			means = meansOnly
		}
		h.Does(trace.StageChoice, says, means)
	case strings.HasPrefix(h.Verdict, "dnat to") || strings.HasPrefix(h.Verdict, "redirect to"):
		means := ""
		switch {
		case strings.HasPrefix(h.Verdict, "redirect to"):
			means = trace.MeansRedirect
		case strings.HasPrefix(h.Chain, "KUBE-SEP-"):
			means = meansSEP
		}
		h.DoesAt(trace.StageDNAT, h.Where(), h.Verdict, means)
	case strings.HasPrefix(h.Verdict, "masquerade") || strings.HasPrefix(h.Verdict, "snat to"):
		h.Does(trace.StageSNAT, h.Where()+": "+h.Verdict, "")
	case h.Verdict == "return" && strings.Contains(h.Chain, "POSTROUTING"):
		h.Does(trace.StageSNAT, h.Where()+" returns (no mark 0x4000)", trace.MeansNone)
	}
}

// stampMark marks a hop that sets kube-proxy's masquerade mark (0x4000) on a packet that did not have it: the
// rule that jumped to KUBE-MARK-MASQ is who asks for the masquerade.
func stampMark(h *trace.Hop, from, to uint32, caller string) {
	if from&0x4000 != 0 || to&0x4000 == 0 {
		return
	}
	says, means := "mark 0x4000: "+h.Where(), ""
	if h.Chain == "KUBE-MARK-MASQ" {
		says = "mark 0x4000: KUBE-MARK-MASQ"
		if caller != "" {
			says = "mark 0x4000: " + caller + " → KUBE-MARK-MASQ"
		}
		if strings.HasPrefix(caller, "KUBE-EXT-") {
			means = meansExternal
		}
	}
	h.Does(trace.StageMark, says, means)
}

// endpointRules counts a Service chain's rules that send packets to an endpoint's chain.
func endpointRules(c *Chain) int {
	n := 0
	for _, r := range c.Rules {
		if strings.Contains(r.Text, "-j KUBE-SEP-") {
			n++
		}
	}
	return n
}

// Guide says a stage in the guide's terms.
func (Engine) Guide(t dataplanes.Told) string { return guideSentence(t, false) }

// IPVSModeGuide is the sentence for a stage of IPVS mode's iptables rules, which this engine walks.
func IPVSModeGuide(t dataplanes.Told) string { return guideSentence(t, true) }

func guideSentence(t dataplanes.Told, ipvs bool) string {
	switch t.Stage {
	case dataplanes.TellMatch:
		if ipvs {
			if t.Means(meansNodePort) {
				return "The guide's KUBE-NODEPORTS is KUBE-NODE-PORT in IPVS mode: one rule matches every NodePort through an ipset."
			}
			return "In IPVS mode KUBE-SERVICES matches every ClusterIP through an ipset and lets IPVS translate it."
		}
		if t.Means(meansNodePort) {
			return "As in the guide: KUBE-SERVICES' last rule sends packets for the node's own addresses (addrtype LOCAL) to KUBE-NODEPORTS, where the NodePort's rule matches."
		}
		return "As in the guide: a KUBE-SERVICES rule for the Service's ClusterIP and port matches."
	case dataplanes.TellService:
		switch {
		case t.Means(meansLocal):
			return "With a traffic policy of Local, which the guide does not show, the packet reaches the Service's KUBE-SVL chain, which holds only this node's endpoints, in place of its KUBE-SVC chain."
		case t.Means(meansExternal):
			return "The packet reaches the Service's KUBE-SVC chain, as in the guide, but by way of a KUBE-EXT chain (Kubernetes 1.25 and later), which the guide does not show."
		}
		return "As in the guide, the packet reaches the Service's own KUBE-SVC chain."
	case dataplanes.TellChoice:
		switch {
		case t.Means(trace.MeansAffinity):
			return "Session affinity, which the guide does not show: this client is in the endpoint's recent list (a KUBE-SVC rule with -m recent --rcheck), so it goes back to the endpoint it had, before any statistic rule draws; a new client gets 1/N."
		case t.Means(meansCascade):
			return "As in the guide: the KUBE-SVC chain's statistic --mode random rules each take their share of what the rules above left, so every endpoint gets 1/N."
		}
		return "The KUBE-SVC chain's one rule sends the packet to its only endpoint."
	case dataplanes.TellDNAT:
		if !t.Means(meansSEP) {
			return dataplanes.NotKubeProxyDNAT(t)
		}
		return "As in the guide, the endpoint's KUBE-SEP chain DNATs to the pod's address and port."
	case dataplanes.TellSNAT:
		switch {
		case t.MeansAt(trace.StageMark, meansExternal):
			return "The guide's KUBE-MARK-MASQ marks the packet and KUBE-POSTROUTING masquerades it; since Kubernetes 1.25 the mark is asked for in KUBE-EXT, not in KUBE-SVC or KUBE-NODEPORTS as the guide shows."
		case t.Has(trace.StageMark) && t.Differs:
			return "As in the guide: only packets KUBE-MARK-MASQ marked are masqueraded by KUBE-POSTROUTING; the paths differ."
		case t.Has(trace.StageMark):
			return "As in the guide: KUBE-MARK-MASQ marks the packet and KUBE-POSTROUTING masquerades it."
		}
		return "No KUBE-MARK-MASQ mark, so KUBE-POSTROUTING leaves the source alone."
	case dataplanes.TellReply:
		if ipvs {
			return "conntrack undoes the masquerade and IPVS's connection entry the DNAT, so the client sees the answer come from where it sent."
		}
		return "As in the guide, conntrack undoes both translations on the way back, so the client sees the answer come from where it sent."
	}
	return ""
}

// ChoiceRule is how the Service chain chooses, the same for every path: the random cascade, each rule's stored
// probability in rule order, the last rule taking the rest ("" with fewer than two rules).
func (Engine) ChoiceRule(t *trace.Trace) string {
	type rule struct {
		n int
		p float64
	}
	var rules []rule
	chain := ""
	for _, p := range t.Paths {
		for _, h := range p.Hops {
			part, ok := h.Part(trace.StageChoice)
			if !ok || part.Means != meansCascade {
				continue
			}
			chain = h.Chain
			if !slices.ContainsFunc(rules, func(x rule) bool { return x.n == h.Rule }) {
				rules = append(rules, rule{h.Rule, h.Probability})
			}
		}
	}
	if len(rules) < 2 {
		return ""
	}
	slices.SortFunc(rules, func(a, b rule) int { return a.n - b.n })
	var parts []string
	for _, x := range rules {
		if x.p > 0 {
			parts = append(parts, fmt.Sprintf("rule %d %.11f", x.n, x.p))
		} else {
			parts = append(parts, fmt.Sprintf("rule %d the rest", x.n))
		}
	}
	return fmt.Sprintf("%s: statistic --mode random cascade, %s", chain, strings.Join(parts, ", "))
}

// GuideNote is one short note, for the trace table, on where the rules differ from the older ones the guide
// shows: the KUBE-EXT chains of Kubernetes 1.25 and later, and KUBE-MARK-MASQ in them ("" when nothing differs).
func (Engine) GuideNote(t *trace.Trace) string {
	ext, masq := "", false
	for _, p := range t.Paths {
		for _, h := range p.Hops {
			if h.Matched && strings.HasPrefix(h.Chain, "KUBE-EXT-") {
				ext = h.Chain
			}
			if part, ok := h.Part(trace.StageMark); ok && part.Means == meansExternal {
				masq = true
			}
		}
	}
	switch {
	case ext == "":
		return ""
	case masq:
		return fmt.Sprintf("since Kubernetes 1.25 NodePort and external traffic goes through a KUBE-EXT chain (%s here), "+
			"which jumps to KUBE-MARK-MASQ; the guide shows KUBE-MARK-MASQ in KUBE-SVC/KUBE-NODEPORTS directly.", ext)
	}
	return fmt.Sprintf("since Kubernetes 1.25 NodePort and external traffic goes through a KUBE-EXT chain (%s here) "+
		"on its way to KUBE-SVC; the guide shows KUBE-NODEPORTS jumping to KUBE-SVC directly.", ext)
}

var _ dataplanes.Explainer = Engine{}
