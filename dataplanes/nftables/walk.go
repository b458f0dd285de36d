package nftables

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
	"github.com/k8sguide/k8sguide/dataplanes/netstate"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

var hooks = map[string]netfilter.Hook{
	"prerouting":  netfilter.Prerouting,
	"input":       netfilter.Input,
	"forward":     netfilter.Forward,
	"output":      netfilter.Output,
	"postrouting": netfilter.Postrouting,
}

// BaseChains implements netfilter.Ruleset: the base chains of the ip and inet tables that are not in Skip, and,
// for a pasted dump, where it may lack some (see gaps).
func (rs *Ruleset) BaseChains() []netfilter.BaseChain {
	out := rs.realBaseChains()
	if rs.pasted && len(out) > 0 {
		out = append(out, rs.gaps(out)...)
	}
	return out
}

// gaps are stand-ins for base chains a pasted dump may lack, which record what it lacks when a packet passes
// their hook (the path's verdict is then unknown) and let it go on:
//
//   - a nat chain at prerouting and output, when no table has one: what translates a Service's packet is not
//     in the input (a filter table alone, or kube-proxy's per-service chains without its base chains);
//   - a table the input ends or starts inside may have base chains it does not show (see below).
func (rs *Ruleset) gaps(real []netfilter.BaseChain) []netfilter.BaseChain {
	var out []netfilter.BaseChain
	lacks := func(hook netfilter.Hook, prio int, format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		out = append(out, netfilter.BaseChain{Hook: hook, Priority: prio, NAT: prio == netfilter.PriorityDstNAT, StandIn: true,
			Run: func(w *netfilter.Walk) netfilter.Verdict {
				w.Missing("%s", msg)
				return netfilter.Accept
			}})
	}
	for _, h := range []struct {
		hook netfilter.Hook
		name string
		what string
	}{{netfilter.Prerouting, "prerouting", "a packet arriving at the node"}, {netfilter.Output, "output", "a packet the node sends"}} {
		if !slices.ContainsFunc(real, func(c netfilter.BaseChain) bool { return c.NAT && c.Hook == h.hook }) {
			lacks(h.hook, netfilter.PriorityDstNAT, "a nat base chain at hook %s (`type nat hook %s priority dstnat`): the input has none, so what translates %s to a Service's endpoint is not known", h.name, h.name, h.what)
		}
	}
	for _, t := range rs.Tables {
		if t.Cut == "" || !rs.walks(t) {
			continue
		}
		// The table's part the input does not show may have base chains at any hook. They run at the hooks
		// where a packet's walk ends (INPUT for the node, POSTROUTING for the rest), last: a path a shown rule
		// drops stays dropped, and one that gets through is unknown.
		for _, h := range []netfilter.Hook{netfilter.Input, netfilter.Postrouting} {
			lacks(h, 1<<20, "the base chains of table %s %s the input does not show (%s): they may drop or change the packet", t.Family, t.Name, t.Cut)
		}
	}
	return out
}

// walks says whether the walk goes through t's base chains (family ip or inet, not left out).
func (rs *Ruleset) walks(t *Table) bool {
	return (t.Family == "ip" || t.Family == "inet") && !rs.Skip[t.Name] && !rs.Skip[t.Family+" "+t.Name]
}

// realBaseChains are the base chains of the ip and inet tables that are not in Skip.
func (rs *Ruleset) realBaseChains() []netfilter.BaseChain {
	var out []netfilter.BaseChain
	for _, t := range rs.Tables {
		if !rs.walks(t) {
			continue
		}
		for _, c := range t.Chains {
			hook, ok := hooks[c.Hook]
			if !ok {
				continue
			}
			bc := netfilter.BaseChain{
				Hook:     hook,
				Priority: c.Prio,
				Table:    t.Family + " " + t.Name,
				Name:     c.Name,
				NAT:      c.Type == "nat",
				Created:  netfilter.Creation{Table: t.Handle, Chain: c.Handle},
				Run: func(w *netfilter.Walk) netfilter.Verdict {
					e := &eval{w: w, t: t, table: t.Family + " " + t.Name}
					return e.run(c)
				},
			}
			if !bc.Created.Known() {
				bc.OrderUnknown = "the input shows no nf_tables handles for it (`nft -a list ruleset` prints them)"
			}
			out = append(out, bc)
		}
	}
	return out
}

// jumpStack is the kernel's NFT_JUMP_STACK_SIZE; maxSteps bounds one base chain's walk of a malformed
// (looping) ruleset, which the kernel would refuse to load (Walk.Step bounds the whole trace).
const (
	jumpStack = 16
	maxSteps  = 1 << 16
)

type eval struct {
	w     *netfilter.Walk
	t     *Table
	table string
	// where the current rule is, for notes
	chain  string
	ruleNo int
	// affinity: the rule being evaluated found the packet's source in a session-affinity set (affinity-…).
	affinity bool
	// drawn: the rule being evaluated made a random choice (numgen, hash), and what it gave.
	drawn *draw
	text  string
	// stopped is set when the current rule cannot be decided from the input (Walk.Missing says what it lacks):
	// the walk ends there, unknown.
	stopped bool
}

// unknownHere records what the input lacks to decide the current rule and stops the walk at it.
func (e *eval) unknownHere(format string, args ...any) {
	e.w.Missing(format, args...)
	e.stopped = true
}

type frame struct {
	c   *Chain
	pos int
	// via are the chains gotos left on the way to c: the walk is still inside them.
	via []string
}

// RuleCount is the number of rules in every table the walk takes (netfilter.Sized: it bounds the walk's work).
func (rs *Ruleset) RuleCount() int {
	n := 0
	for _, t := range rs.Tables {
		for _, c := range t.Chains {
			n += len(c.Rules)
		}
	}
	return n
}

// run walks one base chain: rule by rule, following jumps and gotos, until a verdict ends it or its policy
// applies.
func (e *eval) run(base *Chain) (v netfilter.Verdict) {
	defer func() {
		if r := recover(); r != nil {
			e.w.Missing("what %s %s does: k8sguide's nftables walk failed there (%v)", e.table, base.Name, r)
			v = netfilter.Unknown
		}
	}()
	var stack []frame
	cur, pos := base, 0
	var via []string // the chains gotos left on the way to cur since the last jump
	// inside are the chains the walk is in, outermost first.
	inside := func() []string {
		var out []string
		for _, f := range stack {
			out = append(append(out, f.via...), f.c.Name)
		}
		return append(append(out, via...), cur.Name)
	}
	for steps := 0; ; steps++ {
		if steps > maxSteps {
			e.w.Missing("the end of %s %s: the walk did not end after %d rules (a loop?)", e.table, base.Name, maxSteps)
			return netfilter.Unknown
		}
		if !e.w.Step() {
			// The budget of the whole trace is spent (the walker says so); stop as the iptables engine does.
			return netfilter.Unknown
		}
		if pos >= len(cur.Rules) {
			if cur.Cut != "" {
				// What the chain does after the rules the input shows is not known: they may go on.
				e.w.Missing("the rest of chain %s %s: %s", e.table, cur.Name, cur.Cut)
				return netfilter.Unknown
			}
			if len(stack) == 0 {
				return e.policy(base)
			}
			cur, pos, via = stack[len(stack)-1].c, stack[len(stack)-1].pos, nil
			stack = stack[:len(stack)-1]
			continue
		}
		r := cur.Rules[pos]
		pos++
		out := e.rule(cur, pos, r)
		switch out.verdict {
		case "unknown":
			return netfilter.Unknown
		case "accept":
			return netfilter.Accept
		case "drop":
			return netfilter.Drop
		case "reject":
			return netfilter.Reject
		case "queue":
			e.w.Note("%s %s: a rule queues the packet to a userspace program; the trace assumed it accepts it", e.table, cur.Name)
			return netfilter.Accept
		case "return":
			if len(stack) == 0 {
				return e.policy(base)
			}
			cur, pos, via = stack[len(stack)-1].c, stack[len(stack)-1].pos, nil
			stack = stack[:len(stack)-1]
		case "jump", "goto":
			target := e.t.Chain(out.target)
			if target == nil {
				e.w.Missing("chain %s %s (%s %s #%d %s to it; the input does not have it)", e.table, out.target, e.table, cur.Name, pos, map[string]string{"jump": "jumps", "goto": "goes"}[out.verdict])
				return netfilter.Unknown
			}
			if target.headUnknown {
				e.w.Missing("chain %s %s (%s %s #%d %s to it): %s", e.table, target.Name, e.table, cur.Name, pos, map[string]string{"jump": "jumps", "goto": "goes"}[out.verdict], target.Cut)
				return netfilter.Unknown
			}
			// The load-time check refuses chains that loop; the walk stops one itself wherever it is bypassed.
			if e.w.Loop(e.table, target.Name, inside()) {
				return netfilter.Unknown
			}
			if out.verdict == "jump" {
				if e.w.TooDeep(e.table, cur.Name, len(stack), jumpStack) {
					return netfilter.Unknown
				}
				stack = append(stack, frame{cur, pos, via})
				via = nil
			} else {
				via = append(slices.Clip(via), cur.Name)
			}
			cur, pos = target, 0
		}
	}
}

// policy records the base chain's policy and applies it.
func (e *eval) policy(c *Chain) netfilter.Verdict {
	p := c.Policy
	if p == "" {
		p = "accept"
	}
	h := trace.Hop{Table: e.table, Chain: c.Name, Rule: 0, Text: "policy " + p, Matched: true, Verdict: "policy " + p}
	e.w.Add(h)
	if p == "drop" {
		e.w.VerdictBy(h)
		return netfilter.Drop
	}
	return netfilter.Accept
}

type outcome struct {
	verdict string // "" or continue, accept, drop, reject, return, jump, goto, queue
	target  string
}

// rule evaluates one rule and records it as a hop.
func (e *eval) rule(c *Chain, pos int, r *Rule) outcome {
	e.chain, e.ruleNo, e.text = c.Name, pos, r.Text
	hop := trace.Hop{Table: e.table, Chain: c.Name, Rule: pos, Text: r.Text, Service: ServiceFromChain(c.Name)}
	if hop.Service == "" {
		hop.Service = trace.ServiceFromComment(r.Comment)
	}
	e.stopped, e.affinity, e.drawn = false, false, nil
	fail := func(reason string) outcome {
		hop.Matched = false
		hop.Reason = reason
		e.stamp(&hop, r, nil)
		e.w.Add(hop)
		if e.stopped {
			return outcome{verdict: "unknown"}
		}
		return outcome{verdict: "continue"}
	}
	if len(r.Stmts) <= 1 && dataplanes.Elision(r.Text) {
		// Rules the paste left out ("...", "[...]"): what they did is not known.
		e.unknownHere("the rules the paste left out of %s %s where it says %q (before its rule %d as pasted)", e.table, c.Name, r.Text, pos)
		return fail("the paste left rules out here")
	}
	var out outcome
	for i, s := range r.Stmts {
		if out.verdict != "" {
			break
		}
		switch s.Kind {
		case SMatch:
			if ok, reason := e.match(s, &hop); !ok {
				return fail(reason)
			}
		case SVerdict:
			out = outcome{verdict: s.Verdict, target: s.Target}
		case SVmap:
			l := e.lookup(s.Left, s.Right, &hop)
			if !l.found {
				return fail(l.reason)
			}
			if l.value == nil || l.value.Kind != KVerdict {
				e.assume(s, "the map's value is not a verdict")
				continue
			}
			out = outcome{verdict: l.value.Str, target: l.value.Target}
			if hop.Service == "" {
				hop.Service = ServiceFromChain(l.value.Target)
			}
			if hop.Service == "" {
				hop.Service = trace.ServiceFromComment(l.comment)
			}
		case SMangle:
			e.mangle(s, &hop)
		case SCounter, SLog:
		case SLimit, SQuota:
			e.assume(s, "rate limits and quotas depend on traffic the trace does not know")
		case SNotrack:
			e.w.Note("%s %s rule %d: notrack exempts the packet from conntrack (and so from NAT); the trace does not model that", e.table, c.Name, pos)
		case SDNAT, SSNAT, SMasquerade, SRedirect:
			ok, reason := e.nat(s, &hop)
			if !ok {
				return fail(reason)
			}
			// nftables nat statements end the chain with accept (the kernel trace shows "verdict accept").
			out = outcome{verdict: "accept"}
		case SReject:
			out = outcome{verdict: "reject"}
		case SSetUpdate:
			e.setUpdate(s, &hop)
		case SXt:
			if !e.xt(s, r.Stmts[i+1:]) {
				hop.Reason = "not known: " + RenderStmt(s)
				return fail(hop.Reason)
			}
		default:
			e.assume(s, "the tracer does not understand this statement")
		}
	}
	hop.Matched = true
	if out.verdict == "" {
		out.verdict = "continue"
	}
	if hop.Verdict == "" {
		hop.Verdict = out.verdict
		if out.target != "" {
			hop.Verdict += " " + out.target
		}
	}
	e.stamp(&hop, r, e.drawn)
	e.w.Add(hop)
	if e.affinity {
		e.w.Affinity(hop) // kube-proxy's `ip saddr @affinity-… goto endpoint-…`
	}
	if (out.verdict == "goto" || out.verdict == "jump") && strings.HasPrefix(out.target, "local-") {
		e.w.LocalEndpoints(hop) // kube-proxy's chain of a Service's endpoints on this node
	}
	if out.verdict == "drop" || out.verdict == "reject" {
		e.w.VerdictBy(hop)
	}
	return out
}

// assume notes that the trace took a condition it cannot evaluate as true.
func (e *eval) assume(s *Stmt, why string) {
	e.w.Note("%s %s rule %d: the trace assumed `%s` matches: %s", e.table, e.chain, e.ruleNo, RenderStmt(s), why)
}

// match evaluates one match statement; reason says why it failed.
func (e *eval) match(s *Stmt, hop *trace.Hop) (bool, string) {
	left, right := s.Left, s.Right
	if left == nil || right == nil {
		e.assume(s, "the match is incomplete")
		return true, ""
	}
	if left.Kind == KNumgen || left.Kind == KHash {
		return e.randomMatch(s, hop)
	}
	if left.Kind == KFib && left.Field == "type" && e.w.Net != nil {
		if a := e.fibAddr(left); a.IsValid() && e.w.Net.LocalUnknown(a) {
			// The node's addresses were not given: whether this one is among them is a fact of the walk, one
			// for every rule that asks it (addrType takes the world's answer).
			if _, ok := e.w.Suppose(netstate.LocalFact(a)); !ok {
				e.unknownHere("%s (`%s` in %s %s rule %d)", netstate.LocalFact(a), RenderStmt(s), e.table, e.chain, e.ruleNo)
				return false, "not known: whether " + a.String() + " is the node's"
			}
		}
	}
	if why := e.assumedKey(left); why != "" {
		// What the statement tests was assumed, not read (a pasted dump has no routes): a fact the walk may be
		// made again with each answer to (see netfilter.Walk.Suppose).
		fact := fmt.Sprintf("%s (`%s` in %s %s rule %d)", why, RenderStmt(s), e.table, e.chain, e.ruleNo)
		v, ok := e.w.Suppose(fact)
		switch {
		case !ok:
			e.unknownHere("%s", fact)
			return false, "not known: " + why
		case !v:
			return false, "not known, taken as not matching: " + why
		}
		return true, ""
	}
	if bits, ok := randomBits(left); ok && right.Kind != KSet && right.Kind != KSetRef {
		return e.randomCompare(s, bits, hop)
	}
	ltext := renderExpr(left, tOther)
	switch right.Kind {
	case KSetRef, KSet:
		vs := e.values(left)
		if r := absentReason(vs); r != "" {
			return false, r
		}
		where := ""
		found, det := false, true
		if right.Kind == KSetRef {
			set := e.t.Set(right.Str)
			if set == nil {
				e.assume(s, "the ruleset has no set @"+right.Str)
				return true, ""
			}
			var i int
			i, det = findInSet(set, vs)
			found = i >= 0
			e.affinity = e.affinity || found && strings.HasPrefix(set.Name, "affinity-")
			where = set.Kind() + " @" + set.Name
			if !found && set.Cut != "" {
				e.unknownHere("whether %s is in %s %s %s: %s", keyText(left, vs), set.Kind(), e.table, set.Name, set.Cut)
				return false, fmt.Sprintf("%s is not in what the input shows of %s", keyText(left, vs), where)
			}
		} else {
			where = renderData(right, left, nil)
			for _, k := range right.Args {
				if m, d := matchKey(vs, k); m {
					found, det = true, d
					if d {
						break
					}
				}
			}
		}
		if !det {
			e.assume(s, unknownWhy(vs))
		}
		if s.Op == "!=" {
			if found && det {
				return false, fmt.Sprintf("%s is in %s", keyText(left, vs), where)
			}
			return true, ""
		}
		if !found {
			return false, fmt.Sprintf("%s is not in %s", keyText(left, vs), where)
		}
		return true, ""
	}
	if left.Kind == KConcat {
		vs := e.values(left)
		if r := absentReason(vs); r != "" {
			return false, r
		}
		m, det := matchKey(vs, right)
		if !det {
			e.assume(s, unknownWhy(vs))
			return true, ""
		}
		if m == (s.Op != "!=") {
			return true, ""
		}
		if m {
			return false, fmt.Sprintf("%s is %s", keyText(left, vs), renderTyped(right, left, ""))
		}
		return false, fmt.Sprintf("%s is not %s", keyText(left, vs), renderTyped(right, left, ""))
	}
	v := e.value(left)
	if v.absent != "" {
		return false, v.absent
	}
	if !v.known {
		e.assume(s, v.why)
		return true, ""
	}
	rtext := renderExpr(right, v.t)
	subject := ltext
	if left.Kind == KFib {
		subject = fmt.Sprintf("%s of %s", ltext, e.fibAddr(left))
	}
	detail := ""
	if left.Kind == KBinop && len(left.Args) == 2 {
		inner := e.value(left.Args[0])
		detail = fmt.Sprintf(" (%s is %s)", renderExpr(left.Args[0], tOther), inner)
	}
	switch s.Op {
	case "<", ">", "<=", ">=":
		l, ok := literal(right, v.t)
		c, ok2 := cmp(v, l)
		if !ok || !ok2 {
			e.assume(s, "the comparison is not understood")
			return true, ""
		}
		m := s.Op == "<" && c < 0 || s.Op == ">" && c > 0 || s.Op == "<=" && c <= 0 || s.Op == ">=" && c >= 0
		if !m {
			return false, fmt.Sprintf("%s is %s, not %s %s%s", subject, v, s.Op, rtext, detail)
		}
		return true, ""
	}
	m, det := matchElem(v, right)
	if !det {
		e.assume(s, v.why)
		return true, ""
	}
	if right.Kind != KPrefix && right.Kind != KRange {
		if _, ok := literal(right, v.t); !ok {
			e.assume(s, "the value "+rtext+" is not understood")
			return true, ""
		}
	}
	negate := s.Op == "!="
	if m != negate {
		return true, ""
	}
	switch {
	case right.Kind == KPrefix || right.Kind == KRange:
		if negate {
			return false, fmt.Sprintf("%s %s is in %s", ltext, v, rtext)
		}
		return false, fmt.Sprintf("%s %s is not in %s", ltext, v, rtext)
	case v.t == tStatus:
		if negate {
			return false, fmt.Sprintf("ct status has %s (it is %s)", rtext, v)
		}
		if len(v.flags) == 0 {
			return false, fmt.Sprintf("ct status has no %s: nothing translated this flow", rtext)
		}
		return false, fmt.Sprintf("ct status has no %s (it is %s)", rtext, v)
	case negate:
		return false, fmt.Sprintf("%s is %s%s", subject, v, detail)
	}
	return false, fmt.Sprintf("%s is %s, not %s%s", subject, v, rtext, detail)
}

func absentReason(vs []val) string {
	for _, v := range vs {
		if v.absent != "" {
			return v.absent
		}
	}
	return ""
}

func unknownWhy(vs []val) string {
	var out []string
	for _, v := range vs {
		if !v.known && v.why != "" {
			out = append(out, v.why)
		}
	}
	if len(out) == 0 {
		return "a value in it is not known"
	}
	return strings.Join(out, "; ")
}

// randomMatch evaluates `numgen random mod N == X` (or a hash): a random choice between matching and not.
func (e *eval) randomMatch(s *Stmt, hop *trace.Hop) (bool, string) {
	g := s.Left
	if g.Mod == 0 || g.Mod > 1<<20 {
		e.assume(s, "the random generator's range is not understood")
		return true, ""
	}
	n := uint64(0)
	for x := g.Offset; x < g.Offset+g.Mod; x++ {
		v := val{t: tInt, known: true, num: x}
		var m bool
		switch s.Right.Kind {
		case KSet:
			for _, a := range s.Right.Args {
				if ok, _ := matchElem(v, a); ok {
					m = true
					break
				}
			}
		case KSetRef:
			if set := e.t.Set(s.Right.Str); set != nil {
				for _, el := range set.Elems {
					if ok, _ := matchElem(v, el.Key); ok {
						m = true
						break
					}
				}
			}
		default:
			m, _ = matchElem(v, s.Right)
		}
		if m != (s.Op == "!=") {
			n++
		}
	}
	p := float64(n) / float64(g.Mod)
	e.noteHash(g)
	i := e.w.Choose([]float64{p, 1 - p})
	hop.Probability = p
	if i == 0 {
		e.drawn = &draw{generator: renderExpr(g, tOther), gave: "a matching value"}
		hop.Reason = fmt.Sprintf("%s chose a matching value (chance %d/%d)", renderExpr(g, tOther), n, g.Mod)
		return true, ""
	}
	return false, fmt.Sprintf("%s chose a value that does not match (chance %d/%d)", renderExpr(g, tOther), g.Mod-n, g.Mod)
}

func (e *eval) noteHash(g *Expr) {
	if g.Kind == KHash {
		e.w.Note("%s %s rule %d: %s picks by a hash of the packet that the trace does not compute; it shows every outcome with an equal share", e.table, e.chain, e.ruleNo, renderExpr(g, tOther))
	} else if g.Mode != "random" {
		e.w.Note("%s %s rule %d: %s picks by a counter the trace cannot read; it shows every outcome with an equal share", e.table, e.chain, e.ruleNo, renderExpr(g, tOther))
	}
}

// lookedUp is the result of a map lookup.
type lookedUp struct {
	found   bool
	value   *Expr
	comment string
	reason  string
}

// lookup finds key in a map (anonymous, or @name). A numgen or hash key makes a random choice among the
// map's elements: the walk forks, one path per element.
func (e *eval) lookup(key, data *Expr, hop *trace.Hop) lookedUp {
	type entry struct {
		k, v    *Expr
		comment string
	}
	var entries []entry
	where := ""
	random := key != nil && (key.Kind == KNumgen || key.Kind == KHash)
	var named *Set
	switch {
	case data == nil:
	case data.Kind == KSetRef:
		named = e.t.Set(data.Str)
		if named == nil {
			e.w.Note("%s %s rule %d: the ruleset has no map @%s: the trace took the rule as not matching", e.table, e.chain, e.ruleNo, data.Str)
			return lookedUp{reason: "the ruleset has no map @" + data.Str}
		}
		where = "map @" + named.Name
		if random && named.Cut != "" {
			e.unknownHere("the elements %s picks from in map %s %s: %s", renderExpr(key, tOther), e.table, named.Name, named.Cut)
			return lookedUp{reason: "not known"}
		}
		if random {
			for _, el := range named.Elems {
				entries = append(entries, entry{el.Key, el.Value, el.Comment})
			}
		}
	case data.Kind == KSet:
		for _, a := range data.Args {
			if a.Kind == KPair && len(a.Args) == 2 {
				k := a.Args[0]
				c := ""
				if k.Kind == KElem {
					c = k.Comment
				}
				entries = append(entries, entry{k, a.Args[1], c})
			}
		}
		where = "the rule's map"
	}
	if random {
		if key.Mod == 0 {
			return lookedUp{reason: renderExpr(key, tOther) + " has no range"}
		}
		// One outcome per element (its share of the generator's range), plus one for values no element has.
		var probs []float64
		var which []int
		covered := uint64(0)
		for i, en := range entries {
			n := countInRange(en.k, key.Offset, key.Mod)
			if n == 0 {
				continue
			}
			covered += n
			probs = append(probs, float64(n)/float64(key.Mod))
			which = append(which, i)
		}
		if covered < key.Mod {
			probs = append(probs, float64(key.Mod-covered)/float64(key.Mod))
			which = append(which, -1)
		}
		e.noteHash(key)
		i := e.w.Choose(probs)
		hop.Probability = probs[i]
		g := renderExpr(key, tOther)
		if which[i] < 0 {
			return lookedUp{reason: fmt.Sprintf("%s gave a value that is not in %s (chance %s)", g, where, fraction(key.Mod-covered, key.Mod))}
		}
		en := entries[which[i]]
		e.drawn = &draw{generator: g, gave: renderExpr(en.k, tInt)}
		hop.Reason = fmt.Sprintf("%s gave %s (chance %s)", g, renderExpr(en.k, tInt), fraction(countInRange(en.k, key.Offset, key.Mod), key.Mod))
		return lookedUp{found: true, value: en.v, comment: en.comment}
	}
	vs := e.values(key)
	if r := absentReason(vs); r != "" {
		return lookedUp{reason: r}
	}
	if named != nil {
		i, det := findInSet(named, vs)
		if i < 0 && named.Cut != "" {
			e.unknownHere("whether %s is in map %s %s: %s", keyText(key, vs), e.table, named.Name, named.Cut)
			return lookedUp{reason: fmt.Sprintf("%s is not in what the input shows of %s", keyText(key, vs), where)}
		}
		if i < 0 {
			return lookedUp{reason: fmt.Sprintf("%s is not in %s", keyText(key, vs), where)}
		}
		el := named.Elems[i]
		if !det {
			e.w.Note("%s %s rule %d: %s; the trace took the first element of %s that could match (%s)", e.table, e.chain, e.ruleNo, unknownWhy(vs), where, renderParts(el.Key, componentTypes(key)))
		}
		return lookedUp{found: true, value: el.Value, comment: el.Comment}
	}
	var first *entry
	for i := range entries {
		m, det := matchKey(vs, entries[i].k)
		if !m {
			continue
		}
		if det {
			first = &entries[i]
			break
		}
		if first == nil {
			first = &entries[i]
		}
	}
	if first == nil {
		return lookedUp{reason: fmt.Sprintf("%s is not in %s", keyText(key, vs), where)}
	}
	if m, det := matchKey(vs, first.k); m && !det {
		e.w.Note("%s %s rule %d: %s; the trace took the first element of %s that could match (%s)", e.table, e.chain, e.ruleNo, unknownWhy(vs), where, renderParts(first.k, componentTypes(key)))
	}
	return lookedUp{found: true, value: first.v, comment: first.comment}
}

func fraction(n, d uint64) string { return fmt.Sprintf("%d/%d", n, d) }

// countInRange counts the values of [off, off+mod) an element key (number, range, set of them) covers.
func countInRange(k *Expr, off, mod uint64) uint64 {
	if k == nil {
		return 0
	}
	lo, hi := off, off+mod-1
	switch k.Kind {
	case KElem:
		if len(k.Args) == 1 {
			return countInRange(k.Args[0], off, mod)
		}
	case KNumber:
		if !k.Neg && k.Num >= lo && k.Num <= hi {
			return 1
		}
	case KString:
		if l, ok := literal(k, tInt); ok && l.num >= lo && l.num <= hi {
			return 1
		}
	case KRange:
		if len(k.Args) != 2 {
			return 0
		}
		a, ok1 := literal(k.Args[0], tInt)
		b, ok2 := literal(k.Args[1], tInt)
		if !ok1 || !ok2 {
			return 0
		}
		a.num, b.num = max(a.num, lo), min(b.num, hi)
		if a.num > b.num {
			return 0
		}
		return b.num - a.num + 1
	}
	return 0
}

// values evaluates a key: one value per part of a concatenation.
func (e *eval) values(x *Expr) []val {
	if x != nil && x.Kind == KConcat {
		out := make([]val, len(x.Args))
		for i, a := range x.Args {
			out[i] = e.value(a)
		}
		return out
	}
	return []val{e.value(x)}
}

var transport = map[string]bool{"tcp": true, "udp": true, "sctp": true, "udplite": true, "dccp": true}

// value evaluates a selector on the packet.
func (e *eval) value(x *Expr) val {
	if x == nil {
		return unknown(tOther, "an empty expression")
	}
	t := typeOf(x)
	p := &e.w.Pkt
	proto := strings.ToLower(p.Proto)
	switch x.Kind {
	case KPayload:
		if x.Base != "" {
			return unknown(t, "raw payload "+renderExpr(x, tOther)+" is not modelled")
		}
		switch x.Str {
		case "ip":
		case "ip6":
			return val{t: t, absent: "the packet is IPv4, not IPv6"}
		case "th":
			if !transport[proto] {
				return val{t: t, absent: fmt.Sprintf("the packet is %s, which has no ports", proto)}
			}
		case "tcp", "udp", "sctp", "udplite", "dccp":
			if proto != x.Str {
				return val{t: t, absent: fmt.Sprintf("the packet is %s, not %s", proto, x.Str)}
			}
		case "icmp":
			if proto != "icmp" {
				return val{t: t, absent: fmt.Sprintf("the packet is %s, not icmp", proto)}
			}
			return unknown(t, "icmp fields are not modelled")
		default:
			return unknown(t, x.Str+" headers are not modelled")
		}
		switch x.Field {
		case "saddr":
			if !p.Src.IsValid() {
				return unknown(t, "the source address is not known")
			}
			return val{t: t, known: true, addr: p.Src}
		case "daddr":
			if !p.Dst.IsValid() {
				return unknown(t, "the destination address is not known")
			}
			return val{t: t, known: true, addr: p.Dst}
		case "protocol":
			return e.l4proto(t)
		case "sport":
			if p.Sport == 0 {
				return unknown(t, "the source port is not known (give the source as IP:PORT)")
			}
			return val{t: t, known: true, num: uint64(p.Sport)}
		case "dport":
			if p.Dport == 0 {
				return unknown(t, "the destination port is not known")
			}
			return val{t: t, known: true, num: uint64(p.Dport)}
		}
		return unknown(t, renderExpr(x, tOther)+" is not modelled")
	case KMeta:
		switch x.Key {
		case "l4proto":
			return e.l4proto(t)
		case "mark":
			return val{t: t, known: true, num: uint64(p.Mark)}
		case "iifname", "iif":
			return val{t: t, known: true, str: e.iif()}
		case "oifname", "oif":
			return val{t: t, known: true, str: e.oif()}
		case "nfproto":
			return val{t: t, known: true, str: "ipv4"}
		case "protocol":
			return val{t: t, known: true, str: "ip"}
		case "nftrace":
			return val{t: t, known: true}
		}
		return unknown(t, "meta "+x.Key+" is not modelled")
	case KCt:
		if x.Dir != "" || x.Str != "" {
			return unknown(t, renderExpr(x, tOther)+" is not modelled")
		}
		switch x.Key {
		case "state":
			v := val{t: t, known: true}
			for _, s := range p.CtState {
				switch s := strings.ToLower(s); s {
				case "new", "established", "related", "invalid", "untracked":
					v.flags = append(v.flags, s)
				}
			}
			if len(v.flags) == 0 {
				return unknown(t, "the conntrack state is not known")
			}
			return v
		case "status":
			v := val{t: t, known: true}
			if p.HasCtState("ESTABLISHED") {
				v.flags = append(v.flags, "seen-reply", "assured", "confirmed")
			}
			if p.HasCtState("SNAT") {
				v.flags = append(v.flags, "snat")
			}
			if p.HasCtState("DNAT") {
				v.flags = append(v.flags, "dnat")
			}
			return v
		case "direction":
			if p.New {
				return val{t: t, known: true, str: "original"}
			}
			return unknown(t, "the packet's conntrack direction is not known")
		}
		return unknown(t, "ct "+x.Key+" is not modelled")
	case KFib:
		return e.fib(x)
	case KBinop:
		if len(x.Args) != 2 {
			return unknown(t, "a malformed expression")
		}
		a := e.value(x.Args[0])
		if a.absent != "" || !a.known {
			return a
		}
		b, ok := literal(x.Args[1], a.t)
		if !ok {
			b = e.value(x.Args[1])
			if !b.known {
				return unknown(t, renderExpr(x, tOther)+" is not understood")
			}
		}
		r := val{t: a.t, known: true}
		switch x.Op {
		case "&":
			r.num = a.num & b.num
		case "|":
			r.num = a.num | b.num
		case "^":
			r.num = a.num ^ b.num
		case "<<":
			r.num = a.num << (b.num & 63)
		case ">>":
			r.num = a.num >> (b.num & 63)
		}
		return r
	case KNumber, KString:
		if l, ok := literal(x, tInt); ok {
			return l
		}
	}
	return unknown(t, renderExpr(x, tOther)+" is not modelled")
}

func (e *eval) l4proto(t string) val {
	n, ok := protoNumbers[strings.ToLower(e.w.Pkt.Proto)]
	if !ok {
		return unknown(t, "the packet's protocol is not known")
	}
	return val{t: t, known: true, num: n}
}

// iif is the input interface as the hook sees it (none for packets the node sends, until they loop back).
func (e *eval) iif() string {
	if e.w.Hook == netfilter.Output || e.w.Pkt.FromNode && e.w.Hook == netfilter.Postrouting {
		return ""
	}
	return e.w.Pkt.Iif
}

// assumedKey says why the value a match tests was only assumed ("" when it was read): the interface a packet
// leaves by, when the input has no routes.
func (e *eval) assumedKey(x *Expr) string {
	n := e.w.Net
	switch {
	case n == nil:
	case x.Kind == KMeta && (x.Key == "oifname" || x.Key == "oif") && n.OutAssumed && e.oif() != "" && e.oif() != "lo":
		return fmt.Sprintf("the interface the packet leaves by: the input has no routes, and %s was only assumed; --out-iface tells", e.oif())
	}
	return ""
}

// oif is the output interface as the hook sees it (none before the routing decision).
func (e *eval) oif() string {
	if e.w.Hook == netfilter.Prerouting || e.w.Hook == netfilter.Input {
		return ""
	}
	return e.w.Pkt.Oif
}

func (e *eval) fibAddr(x *Expr) netip.Addr {
	for _, f := range x.Flags {
		switch f {
		case "saddr":
			return e.w.Pkt.Src
		case "daddr":
			return e.w.Pkt.Dst
		}
	}
	return netip.Addr{}
}

func hasFlag(flags []string, f string) bool {
	for _, x := range flags {
		if x == f {
			return true
		}
	}
	return false
}

// fib evaluates a fib expression on the node's routes: `fib daddr type` is the type of the local-table route
// covering the address (unicast when there is none), as inet_dev_addr_type reads it.
func (e *eval) fib(x *Expr) val {
	t := typeOf(x)
	addr := e.fibAddr(x)
	if !addr.IsValid() {
		return unknown(t, "the address fib looks up is not known")
	}
	dev := ""
	if hasFlag(x.Flags, "iif") {
		dev = e.iif()
	} else if hasFlag(x.Flags, "oif") {
		dev = e.oif()
	}
	switch x.Field {
	case "type":
		return val{t: t, known: true, str: e.addrType(addr, dev)}
	case "oif", "oifname":
		if e.w.Net == nil {
			return unknown(t, "the node's routes are not known")
		}
		out := ""
		if e.w.Net.IsLocal(addr) {
			out = "lo"
		} else if r, ok := e.w.Net.Lookup(addr); ok {
			out = r.Dev
		}
		if dev != "" && out != dev {
			out = ""
		}
		return val{t: t, known: true, str: out}
	}
	return unknown(t, "fib "+x.Field+" is not modelled")
}

// addrType is inet_dev_addr_type: the local table's route type for addr ("unicast" when none covers it);
// with dev, only a route through dev counts.
func (e *eval) addrType(addr netip.Addr, dev string) string {
	switch {
	case addr == netip.IPv4Unspecified() || addr == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "broadcast"
	case addr.IsMulticast():
		return "multicast"
	}
	if e.w.Net == nil {
		return "unicast"
	}
	if e.w.Net.LocalUnknown(addr) {
		if local, ok := e.w.Suppose(netstate.LocalFact(addr)); ok && local {
			return "local"
		}
	}
	best, typ, rdev := -1, "", ""
	for _, r := range e.w.Net.Routes {
		if r.Table != "local" || !r.Dst.Contains(addr) {
			continue
		}
		if r.Dst.Bits() > best {
			best, typ, rdev = r.Dst.Bits(), r.Type, r.Dev
		}
	}
	if typ == "" || dev != "" && rdev != dev {
		return "unicast"
	}
	return typ
}

// mangle applies `meta mark set …` (other keys are noted).
func (e *eval) mangle(s *Stmt, hop *trace.Hop) {
	if s.Left == nil {
		e.assume(s, "an incomplete statement")
		return
	}
	switch {
	case s.Left.Kind == KMeta && s.Left.Key == "mark":
		v, ok := e.number(s.Right)
		if !ok {
			e.w.Note("%s %s rule %d: the trace cannot compute `%s`; the mark is left as it was", e.table, e.chain, e.ruleNo, RenderStmt(s))
			return
		}
		stampMark(hop, e.w.Pkt.Mark, uint32(v))
		hop.Changes = append(hop.Changes, e.w.SetMark(uint32(v)))
	case s.Left.Kind == KMeta && s.Left.Key == "nftrace":
	default:
		e.w.Note("%s %s rule %d: `%s` is not modelled; the trace goes on without it", e.table, e.chain, e.ruleNo, RenderStmt(s))
	}
}

// number evaluates a numeric value expression (literal, meta mark, and bit operations on them).
func (e *eval) number(x *Expr) (uint64, bool) {
	if x == nil {
		return 0, false
	}
	switch x.Kind {
	case KNumber, KString:
		l, ok := literal(x, tInt)
		return l.num, ok
	case KMeta:
		if x.Key == "mark" {
			return uint64(e.w.Pkt.Mark), true
		}
	case KBinop:
		if len(x.Args) != 2 {
			return 0, false
		}
		a, ok1 := e.number(x.Args[0])
		b, ok2 := e.number(x.Args[1])
		if !ok1 || !ok2 {
			return 0, false
		}
		switch x.Op {
		case "&":
			return a & b, true
		case "|":
			return a | b, true
		case "^":
			return a ^ b, true
		case "<<":
			return a << (b & 63), true
		case ">>":
			return a >> (b & 63), true
		}
	}
	return 0, false
}

// setUpdate records `update @set { ip saddr }` (session affinity remembers the client); the walk does not
// change the ruleset.
func (e *eval) setUpdate(s *Stmt, hop *trace.Hop) {
	vs := e.values(s.Left)
	var parts []string
	for _, v := range vs {
		parts = append(parts, v.String())
	}
	hop.Changes = append(hop.Changes, fmt.Sprintf("%s @%s with %s", s.Op, s.Target, strings.Join(parts, " . ")))
}

// nat applies dnat, snat, masquerade and redirect. It fails (the rule does not match) when a map holds no
// address for the packet.
func (e *eval) nat(s *Stmt, hop *trace.Hop) (bool, string) {
	var addr netip.Addr
	var port uint16
	if s.Addr != nil {
		target := s.Addr
		if s.Addr.Kind == KMap && len(s.Addr.Args) == 2 {
			l := e.lookup(s.Addr.Args[0], s.Addr.Args[1], hop)
			if !l.found {
				return false, l.reason
			}
			target = l.value
		}
		var ok bool
		addr, port, ok = natTarget(target)
		if !ok {
			e.w.Note("%s %s rule %d: the trace cannot read the address of `%s`; it left the packet untranslated", e.table, e.chain, e.ruleNo, RenderStmt(s))
			hop.Verdict = s.Kind + " (not understood)"
			return true, ""
		}
	}
	if s.Port != nil {
		switch s.Port.Kind {
		case KNumber:
			port = uint16(s.Port.Num)
		case KRange:
			if len(s.Port.Args) == 2 {
				if l, ok := literal(s.Port.Args[0], tPort); ok {
					port = uint16(l.num)
				}
			}
			if s.Kind != SMasquerade && s.Kind != SSNAT {
				e.w.Note("%s %s rule %d: `%s` picks a port from a range; the trace shows the first", e.table, e.chain, e.ruleNo, RenderStmt(s))
			}
		}
	}
	switch s.Kind {
	case SDNAT:
		if !addr.IsValid() {
			e.w.Note("%s %s rule %d: `%s` has no address; the trace left the packet untranslated", e.table, e.chain, e.ruleNo, RenderStmt(s))
			hop.Verdict = "dnat (not understood)"
			return true, ""
		}
		to := netip.AddrPortFrom(addr, port)
		hop.Changes = append(hop.Changes, e.w.DNAT(to))
		hop.Verdict = "dnat to " + netip.AddrPortFrom(e.w.Pkt.Dst, e.w.Pkt.Dport).String()
	case SRedirect:
		to := e.w.RedirectAddr()
		if !to.IsValid() {
			e.w.Note("%s %s rule %d: the trace cannot tell which local address `%s` uses", e.table, e.chain, e.ruleNo, RenderStmt(s))
			hop.Verdict = "redirect (not understood)"
			return true, ""
		}
		hop.Changes = append(hop.Changes, e.w.Redirect(netip.AddrPortFrom(to, port)))
		hop.Verdict = "redirect to " + netip.AddrPortFrom(e.w.Pkt.Dst, e.w.Pkt.Dport).String()
	case SSNAT:
		if !addr.IsValid() {
			e.w.Note("%s %s rule %d: `%s` has no address; the trace left the packet untranslated", e.table, e.chain, e.ruleNo, RenderStmt(s))
			hop.Verdict = "snat (not understood)"
			return true, ""
		}
		if port != 0 {
			e.w.Note("%s %s rule %d: `%s` also picks a source port; the trace shows only the address", e.table, e.chain, e.ruleNo, RenderStmt(s))
		}
		hop.Changes = append(hop.Changes, e.w.SNAT(addr))
		hop.Verdict = "snat to " + e.w.Pkt.Src.String()
	case SMasquerade:
		how, random := "masquerade", false
		for _, f := range s.Flags {
			how += " " + f
			random = random || f == "random" || f == "fully-random"
		}
		hop.Changes = append(hop.Changes, e.w.Masquerade(how, random))
		hop.Verdict = "masquerade to " + e.w.MasqueradedTo()
	}
	return true, ""
}

// natTarget reads a nat target value: an address, or address . port.
func natTarget(x *Expr) (netip.Addr, uint16, bool) {
	if x == nil {
		return netip.Addr{}, 0, false
	}
	if x.Kind == KElem && len(x.Args) == 1 {
		x = x.Args[0]
	}
	switch x.Kind {
	case KString:
		a, err := netip.ParseAddr(x.Str)
		return a, 0, err == nil
	case KConcat:
		if len(x.Args) != 2 {
			return netip.Addr{}, 0, false
		}
		a, _, ok := natTarget(x.Args[0])
		p, ok2 := literal(x.Args[1], tPort)
		if !ok || !ok2 || p.num > 65535 {
			return netip.Addr{}, 0, false
		}
		return a, uint16(p.num), true
	}
	return netip.Addr{}, 0, false
}

// Prefixes of kube-proxy's per-service chain names: service-HASH-NS/NAME/PROTO/PORTNAME and the like.
var serviceChainPrefixes = []string{"service-", "external-", "local-", "endpoint-", "firewall-", "affinity-"}

// ServiceFromChain names the Service ("namespace/name", plus ":port" when the port has a name) of a
// kube-proxy nftables chain (service-…, external-…, local-…, endpoint-…, firewall-…) or affinity set; ""
// for any other name.
func ServiceFromChain(name string) string {
	for _, p := range serviceChainPrefixes {
		rest, ok := strings.CutPrefix(name, p)
		if !ok {
			continue
		}
		hash, rest, ok := strings.Cut(rest, "-")
		if !ok || len(hash) != 8 || strings.IndexFunc(hash, func(r rune) bool {
			return !(r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
		}) >= 0 {
			return ""
		}
		rest, _, _ = strings.Cut(rest, "__")
		parts := strings.Split(rest, "/")
		if len(parts) != 4 || parts[0] == "" || parts[1] == "" {
			return ""
		}
		s := parts[0] + "/" + parts[1]
		if parts[3] != "" {
			s += ":" + parts[3]
		}
		return s
	}
	return ""
}

// xtHarmless are the iptables-nft targets that leave the packet and its path as they are (they log or trace):
// the walk goes on past them. Every other xt target (DNAT, SNAT, MASQUERADE, MARK, REDIRECT, REJECT, CONNMARK,
// …) changes the packet or ends its walk in a way nft does not print: nft shows such a rule as `xt target
// NAME`, without its arguments.
var xtHarmless = map[string]bool{"LOG": true, "NFLOG": true, "ULOG": true, "TRACE": true, "AUDIT": true,
	"CHECKSUM": true}

// xtAlwaysMatch are the xt matches whose truth does not depend on the packet: a comment, a counter.
var xtAlwaysMatch = map[string]bool{"comment": true, "nfacct": true}

// xt evaluates an iptables-nft extension nft printed without its arguments; rest are the rule's statements
// after it. It returns false when what the extension decides is not known and matters (the walk ends there,
// unknown).
func (e *eval) xt(s *Stmt, rest []*Stmt) bool {
	kind, name, _ := strings.Cut(s.Name, " ")
	where := fmt.Sprintf("%s %s", e.table, e.chain)
	switch {
	case kind == "target" && xtHarmless[name]:
		e.w.Note("%s rule %d: iptables-nft's xt target %s only logs or traces; the walk goes on", where, e.ruleNo, name)
		return true
	case kind == "match" && xtAlwaysMatch[name]:
		e.w.Note("%s rule %d: an iptables-nft extension (xt match %s) matches every packet", where, e.ruleNo, name)
		return true
	case kind == "match" && !effective(rest):
		// Nothing after it does anything: whether it matches changes nothing.
		e.assume(s, "an iptables-nft extension ("+s.Name+") that nft cannot show; the rule does nothing either way")
		return true
	case kind == "target":
		e.unknownHere("what iptables-nft's xt target %s in %s does: nft prints it without its arguments; use iptables-nft-save for these tables", name, where)
	default:
		e.unknownHere("whether iptables-nft's xt %s %s in %s matches: nft prints it without its arguments; use iptables-nft-save for these tables", kind, name, where)
	}
	return false
}

// effective says whether any of the statements changes the packet or its path.
func effective(stmts []*Stmt) bool {
	for _, s := range stmts {
		switch s.Kind {
		case SMatch, SCounter, SLog, SLimit, SQuota:
		case SXt:
			kind, name, _ := strings.Cut(s.Name, " ")
			if kind == "target" && !xtHarmless[name] {
				return true
			}
		default:
			return true
		}
	}
	return false
}

// randomBits is how many low bits of `meta random` a mask keeps (31 for 0x7fffffff, as iptables-nft's
// statistic match writes it); ok is false for a mask that is not 2^n-1.
func randomBits(x *Expr) (bits uint, ok bool) {
	switch {
	case x == nil:
	case x.Kind == KMeta && x.Key == "random":
		return 32, true
	case x.Kind == KBinop && x.Op == "&" && len(x.Args) == 2 && x.Args[0].Kind == KMeta && x.Args[0].Key == "random":
		m, ok := literal(x.Args[1], tInt)
		if !ok || m.num == 0 || m.num > 0xffffffff || m.num&(m.num+1) != 0 {
			return 0, false
		}
		for m.num != 0 {
			bits++
			m.num >>= 1
		}
		return bits, true
	}
	return 0, false
}

// randomCompare evaluates `meta random & 2147483647 < N` (iptables-nft's -m statistic --mode random
// --probability N/2^31): a random choice between matching, with chance N/2^31, and not.
func (e *eval) randomCompare(s *Stmt, bits uint, hop *trace.Hop) (bool, string) {
	r, ok := literal(s.Right, tInt)
	if !ok {
		e.unknownHere("the chance of `%s` in %s %s rule %d: the value is not understood", RenderStmt(s), e.table, e.chain, e.ruleNo)
		return false, "not known"
	}
	span := uint64(1) << bits // values the masked random number takes, each as likely
	var n uint64              // how many of them match
	c := min(r.num, span)
	switch s.Op {
	case "<":
		n = c
	case "<=":
		n = min(r.num+1, span)
	case ">":
		n = span - min(r.num+1, span)
	case ">=":
		n = span - c
	case "==", "":
		if r.num < span {
			n = 1
		}
	case "!=":
		n = span
		if r.num < span {
			n--
		}
	default:
		e.unknownHere("the chance of `%s` in %s %s rule %d: the operator is not understood", RenderStmt(s), e.table, e.chain, e.ruleNo)
		return false, "not known"
	}
	p := float64(n) / float64(span)
	i := e.w.Choose([]float64{p, 1 - p})
	hop.Probability = p
	left := renderExpr(s.Left, tOther)
	if i == 0 {
		hop.Reason = fmt.Sprintf("%s chose a matching value (chance %d/%d)", left, n, span)
		return true, ""
	}
	return false, fmt.Sprintf("%s chose a value that does not match (chance %d/%d)", left, span-n, span)
}
