// Package netfilter walks a packet through a node's netfilter hooks the way the kernel does: base chains of
// every table by hook and priority, conntrack before nat (only a flow's first packet sees nat chains), the
// routing decision after PREROUTING (and again after nat OUTPUT), INPUT for the node, FORWARD and POSTROUTING
// for everything else. Engines (iptables, nftables) plug in their base chains; random choices inside them fork
// the walk into paths with exact probabilities.
package netfilter

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes/netstate"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// Hook is a netfilter hook.
type Hook string

const (
	Prerouting  Hook = "PREROUTING"
	Input       Hook = "INPUT"
	Forward     Hook = "FORWARD"
	Output      Hook = "OUTPUT"
	Postrouting Hook = "POSTROUTING"
)

// Priorities of the iptables tables (and the nftables names for them).
const (
	PriorityRaw       = -300
	PriorityConntrack = -200
	PriorityMangle    = -150
	PriorityDstNAT    = -100
	PriorityFilter    = 0
	PrioritySrcNAT    = 100
)

// Verdict ends a base chain.
type Verdict int

const (
	Accept Verdict = iota // the packet goes on to the next base chain
	Drop
	Reject
	// Stolen: the hook took the packet and sends it on itself. IPVS does this with a packet it translated:
	// it routes it to the real server and passes it through LOCAL_OUT and POSTROUTING
	// (ip_vs_nat_send_or_cont), so it never reaches the rest of INPUT, nor FORWARD.
	Stolen
	// Unknown: the input lacks what the walk needs to go on (Walk.Missing said what); the path's verdict is
	// trace.Unknown.
	Unknown
)

// BaseChain is a chain attached to a hook.
type BaseChain struct {
	Hook     Hook
	Priority int
	Table    string // for the reader: "nat", "filter", "ip kube-proxy"
	Name     string
	// NAT chains see only the first packet of a flow, and only until a translation of their kind is set up.
	// The kernel runs them all from its nat hook for the hook (priority dstnat or srcnat), ordered among
	// themselves by their own priorities.
	NAT bool
	// Created orders the chain among chains of equal priority on its hook: the kernel runs the one created
	// later first (see Creation). The zero value: the input does not say; OrderUnknown then says why ("an
	// iptables-legacy table"), for the note or the missing answer a walk that depends on the order gives.
	Created      Creation
	OrderUnknown string
	// StandIn marks a chain that stands for rules the input lacks (it records what is missing), not a hook the
	// kernel has: it keeps its place among chains of equal priority.
	StandIn bool
	Run     func(w *Walk) Verdict
}

// Ruleset is one engine's rules on a node.
type Ruleset interface {
	BaseChains() []BaseChain
}

// DNATOwner is a ruleset that translates destinations itself, outside conntrack's NAT (IPVS). For a flow
// it owns, an existing conntrack entry's changed reply tuple is the owner's doing: conntrack does not rewrite
// the destination at PREROUTING, the owner does at its own hook.
type DNATOwner interface {
	OwnsDNAT(proto string, client, dst netip.AddrPort) bool
}

// Packet is the packet as it is while walked.
type Packet struct {
	Src, Dst     netip.Addr
	Sport, Dport uint16 // Sport 0: not known (any)
	Proto        string
	Mark         uint32
	Iif, Oif     string
	// New is true for a flow's first packet (no live conntrack entry); nat chains run only then.
	New bool
	// CtState is what -m conntrack --ctstate / ct state read: NEW or ESTABLISHED, plus DNAT/SNAT once a
	// translation is set up.
	CtState []string
	// Local is true once routing decided the packet is for this node.
	Local bool
	// FromNode is true for packets the node makes itself (OUTPUT path).
	FromNode bool
}

// HasCtState says whether the packet's conntrack state includes s.
func (p *Packet) HasCtState(s string) bool {
	for _, c := range p.CtState {
		if c == s {
			return true
		}
	}
	return false
}

// Names tells the pod and node behind an endpoint address, when the snapshot knows.
type Names func(ip netip.Addr) (pod, node string)

// Walk is one run through the hooks, following one sequence of random choices.
type Walk struct {
	Pkt  Packet
	Net  *netstate.State
	Hook Hook
	// Quiet is the flow's (trace.Flow.Quiet): an engine may leave out the rules that did not match.
	Quiet bool

	hops      []trace.Hop
	verdictBy *trace.Hop
	dnat      *netip.AddrPort
	// affinity names the rule that matched the client's session-affinity entry ("" when none did); localOnly,
	// the rule that sent the packet to the chain of the node's own endpoints.
	affinity, localOnly string
	// redirected: the destination was translated by a redirect (REDIRECT, nft redirect), to the node itself.
	redirected bool
	snat       netip.Addr
	masq       bool
	// masqHow is the masquerading rule's words for what it does; masqRandomPort, whether it picks the port.
	masqHow        string
	masqRandomPort bool
	// masqUnknown, when set, is what the source was masqueraded to in words: the node's address is not known.
	masqUnknown string
	// srcUnknown, when set, says why the source the endpoint sees cannot be told: the input lacks the rules
	// that may masquerade the packet (an IPVS table pasted without the node's iptables rules).
	srcUnknown string
	natDone    map[string]bool // "dst"/"src" translations set up for this flow
	egress     string
	ctDone     bool // conntrack has looked the packet up (after raw, before everything else)
	// Resent is true once IPVS has translated the packet and sent it on (the kernel's skb->ipvs_property):
	// IPVS's own hooks let it pass from then on.
	Resent bool
	// reverseNAT, when set, says what undoes the DNAT on the reply instead of conntrack (IPVS's connection
	// entry); reverseNATName names it short, for Reply.UndoneBy.
	reverseNAT, reverseNATName string
	// turn is the endpoint's place in a round-robin scheduler's order, when the engine knows it.
	turn int
	// Translations an existing conntrack entry will apply, at the dstnat and srcnat points of the walk.
	pendingDst *netip.AddrPort
	pendingSrc netip.Addr

	budget *bounds // what the whole Run may still spend, shared by its walks
	steps  int     // rules this walk evaluated
	owners []DNATOwner

	script       []int
	pos          int
	prob         float64
	alternatives []alternative
	notes        []string
	missing      []string

	// suppose is the world a walk is made in: what it takes as true of the facts the input lacks (nil: none,
	// the first walk); facts are those it met without a supposition (see Suppose).
	suppose map[string]bool
	facts   []string
}

// Suppose is how an engine asks about a fact the input lacks (is the packet in ipset S, which interface does it
// leave by): in a world Run made to try each answer it returns that world's (ok); otherwise ok is false, the
// engine says the fact is missing, and Run, when that left the outcome unknown, walks the packet again in every
// world of the facts met: if all end the same, the input answers after all.
func (w *Walk) Suppose(fact string) (value, ok bool) {
	if v, ok := w.suppose[fact]; ok {
		return v, true
	}
	if !contains(w.facts, fact) {
		w.facts = append(w.facts, fact)
	}
	return false, false
}

// Add records a visited rule (the hook is filled in).
func (w *Walk) Add(h trace.Hop) {
	h.Hook = string(w.Hook)
	w.hops = append(w.hops, h)
}

// LocalEndpoints records that the rule of h sent the packet to kube-proxy's chain of this node's endpoints only
// (externalTrafficPolicy or internalTrafficPolicy Local).
func (w *Walk) LocalEndpoints(h trace.Hop) {
	if w.localOnly == "" {
		w.localOnly = h.Ref()
	}
}

// Affinity records that the rule of h matched the client's session-affinity entry (xt_recent's list, the
// affinity-… set): it sends the client to the endpoint it had, before any random choice. The first such rule
// of a walk is the one that decided.
func (w *Walk) Affinity(h trace.Hop) {
	if w.affinity == "" {
		w.affinity = h.Ref()
	}
}

// Step counts one rule evaluation against the bounds of the path and of the whole Run, and says whether the
// walk may go on. Engines call it per rule, so that no input (a loop of jumps the load-time check did not see,
// chains that jump to each other twice at every level, a fork in every rule) can make a trace run away: when it
// says no, the path is unknown and its Missing says where the walk stopped.
func (w *Walk) Step() bool {
	b := w.budget
	switch {
	case b.evaluations <= 0:
		b.cut = true
		w.Missing("the rest of the walk: k8sguide stopped after %s rule evaluations in this trace (%s rules in the input; a loop in the rules?)", count(b.maxEvaluations), count(b.rules))
		return false
	case w.steps >= b.perPath:
		b.cut = true
		w.Missing("the rest of the walk: k8sguide stopped this path after %s rule evaluations, more than a path through %s rules needs (chains that jump to the same chains over and over?)", count(b.perPath), count(b.rules))
		return false
	}
	b.evaluations--
	w.steps++
	return true
}

// Loop stops a walk that entered a chain it is already inside (through the jumps and gotos that led to it): the
// rules loop, which the kernel refuses to load (ELOOP), so no node has them. Engines call it before they follow
// a jump or goto, with the chains the walk is inside; the load-time check refuses such input first, and this
// holds where that check is bypassed. It returns true (and the path is unknown) when target is among them.
func (w *Walk) Loop(table, target string, inside []string) bool {
	i := slices.Index(inside, target)
	if i < 0 {
		return false
	}
	w.budget.cut = true
	w.Missing("a ruleset the kernel would load: %s jumps in a circle (%s), which the kernel refuses (ELOOP); the walk stopped there", table, strings.Join(append(slices.Clone(inside[i:]), target), " -> "))
	return true
}

// TooDeep stops a walk whose jumps nest deeper than max chains (what the engine's kernel allows, or far past
// what any ruleset needs): it returns true, and the path is unknown, when depth is past max.
func (w *Walk) TooDeep(table, chain string, depth, max int) bool {
	if depth < max {
		return false
	}
	w.budget.cut = true
	w.Missing("a ruleset the kernel would load: %s %s jumps more than %d chains deep; the walk stopped there", table, chain, max)
	return true
}

func count(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// Missing records what the input lacks for this path's answer; the engine then returns Unknown (or goes on,
// when what is missing only makes the end unknown: Run's caller marks it).
func (w *Walk) Missing(format string, args ...any) {
	m := fmt.Sprintf(format, args...)
	if !contains(w.missing, m) {
		w.missing = append(w.missing, m)
	}
}

// Hops returns the hops recorded so far.
func (w *Walk) Hops() []trace.Hop { return w.hops }

// LastHop is the most recently recorded hop, for engines that amend it.
func (w *Walk) LastHop() *trace.Hop {
	if len(w.hops) == 0 {
		return nil
	}
	return &w.hops[len(w.hops)-1]
}

// VerdictBy remembers the hop that dropped or rejected the packet.
func (w *Walk) VerdictBy(h trace.Hop) { h.Hook = string(w.Hook); w.verdictBy = &h }

// Note adds a sentence for the reader.
func (w *Walk) Note(format string, args ...any) {
	n := fmt.Sprintf(format, args...)
	for _, o := range w.notes {
		if o == n {
			return
		}
	}
	w.notes = append(w.notes, n)
}

// Choose takes a random decision among len(probs) outcomes with the given probabilities (they add up to 1)
// and returns the outcome this walk follows. Every other outcome with a non-zero probability is walked too,
// in its own path.
func (w *Walk) Choose(probs []float64) int {
	var i int
	if w.pos < len(w.script) {
		i = w.script[w.pos]
	} else {
		i = -1
		for j, p := range probs {
			if p <= 0 {
				continue
			}
			if i < 0 {
				i = j
				continue
			}
			alt := append(append([]int(nil), w.script...), j)
			w.alternatives = append(w.alternatives, alternative{script: alt, prob: w.prob * p})
		}
		if i < 0 {
			i = 0
		}
		w.script = append(w.script, i)
	}
	w.pos++
	w.prob *= probs[i]
	return i
}

// Probability is the chance of the choices this walk followed so far.
func (w *Walk) Probability() float64 { return w.prob }

// RedirectAddr is the address a redirect sends the packet to: 127.0.0.1 for one the node makes (OUTPUT), else the
// first address of the interface it came in on (nf_nat_redirect_ipv4); invalid when the state does not say.
func (w *Walk) RedirectAddr() netip.Addr {
	if w.Hook == Output {
		return netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	if w.Net == nil {
		return netip.Addr{}
	}
	for _, a := range w.Net.Addresses {
		if a.Dev == w.Pkt.Iif {
			return a.Prefix.Addr()
		}
	}
	return netip.Addr{}
}

// Redirect translates the destination to the node itself (REDIRECT, nft redirect): a local delivery, not a
// Service endpoint, when the address stays the packet's.
func (w *Walk) Redirect(to netip.AddrPort) string {
	s := w.DNAT(to)
	w.redirected = true
	return s
}

// DNAT translates the destination (first packet: sets up the flow's translation).
func (w *Walk) DNAT(to netip.AddrPort) string {
	from := netip.AddrPortFrom(w.Pkt.Dst, w.Pkt.Dport)
	w.Pkt.Dst = to.Addr()
	if to.Port() != 0 {
		w.Pkt.Dport = to.Port()
	}
	w.natDone["dst"] = true
	w.Pkt.CtState = appendState(w.Pkt.CtState, "DNAT")
	d := netip.AddrPortFrom(w.Pkt.Dst, w.Pkt.Dport)
	w.dnat = &d
	return fmt.Sprintf("destination %s -> %s", from, d)
}

// EndpointTurn records the chosen endpoint's turn in a round-robin order the engine read from the node's
// state (1: the next new connection goes there).
func (w *Walk) EndpointTurn(turn int) { w.turn = turn }

// ReverseNATBy says what rewrites the reply's source back to the address the sender used, when that is not
// conntrack undoing a DNAT (IPVS does it from its own connection entry): name is its short name ("IPVS's
// connection entry"), what says it whole.
func (w *Walk) ReverseNATBy(name, what string) { w.reverseNATName, w.reverseNAT = name, what }

// Masquerade translates the source to the address the packet leaves with. how is the rule's own words for it
// ("MASQUERADE --random-fully", "masquerade fully-random"), which the reply repeats; randomPort says whether
// it picks the source port at random.
func (w *Walk) Masquerade(how string, randomPort bool) string {
	src := w.masqueradeSource()
	w.masq = true
	w.masqHow, w.masqRandomPort = how, randomPort
	if !src.IsValid() {
		// A pasted dump without the node's addresses: the packet takes the address of its output interface,
		// which the input does not say. Never print the client's own address (or none) in its place.
		w.masqUnknown = fmt.Sprintf("%s's address (not in the input: --local-addresses)", cmp.Or(w.Pkt.Oif, "the output interface"))
		w.natDone["src"] = true
		w.Pkt.CtState = appendState(w.Pkt.CtState, "SNAT")
		w.Note("masquerade: the source becomes the node's address on %s, which the input does not hold (pass --local-addresses)", cmp.Or(w.Pkt.Oif, "its output interface"))
		return "source " + w.Pkt.Src.String() + " -> " + w.masqUnknown
	}
	return w.SNAT(src)
}

// SourceUnknown says the source the endpoint sees cannot be told from the input, and why (it becomes a note):
// the path's SNAT and the reply's destination are then trace.Unknown, never the client's address in their place.
func (w *Walk) SourceUnknown(why string) {
	w.srcUnknown = why
	w.Note("%s", why)
}

// MasqueradedTo is the source a masquerade gave the packet, in words when the node's address is not known.
func (w *Walk) MasqueradedTo() string {
	if w.srcUnknown != "" {
		return trace.Unknown
	}
	if w.masqUnknown != "" {
		return w.masqUnknown
	}
	return w.Pkt.Src.String()
}

// SNAT translates the source address.
func (w *Walk) SNAT(to netip.Addr) string {
	from := w.Pkt.Src
	w.Pkt.Src = to
	w.snat = to
	w.natDone["src"] = true
	w.Pkt.CtState = appendState(w.Pkt.CtState, "SNAT")
	return fmt.Sprintf("source %s -> %s", from, to)
}

func (w *Walk) masqueradeSource() netip.Addr {
	r, ok := w.Net.Lookup(w.Pkt.Dst)
	if !ok {
		return w.Pkt.Src
	}
	return w.Net.SourceFor(r, w.Pkt.Dst)
}

// SetMark sets the packet mark and returns the change for the hop.
func (w *Walk) SetMark(m uint32) string {
	old := w.Pkt.Mark
	w.Pkt.Mark = m
	return fmt.Sprintf("mark %#x -> %#x", old, m)
}

func appendState(s []string, v string) []string {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}

// Origin says where a walked packet starts.
type Origin struct {
	// FromNode: the node itself sends it (OUTPUT path). Otherwise it arrives on Iif.
	FromNode bool
	Iif      string
}

// The walk's own bounds. Every path is walked from the start (a path with N choices replays the N-1 before it),
// so a trace costs about its paths times the rules on each; an evaluation costs 2-3 µs and about 1 KB while the
// path is kept. A Run stops at the first bound it meets, says where (Missing, notes) and how much of the chance it
// did not walk (Result.Unexplored), so no input costs more than about a second and a few hundred MB, and a
// small one far less: before these bounds a 75-byte loop (PREROUTING -> X -> PREROUTING) took 2.7-4.6 s and
// 1.7-1.9 GB, and 131 bytes with a random fork inside the loop ran for over 10 minutes and 22 GB.
const (
	// maxEvaluations bounds the rules evaluated in one Run, over all its paths and every order and world it
	// tries: ample for 5,000 Services (one pass over KUBE-SERVICES per path).
	maxEvaluations = 2_000_000
	// minEvaluations and evaluationsPerRule bound it by the input's size below that: a legitimate trace costs
	// about the endpoints of a Service times the rules on a path (a Service of 1,000 endpoints, 3,000 rules:
	// about 500,000), so an input that costs far more per rule than that forks or loops without end.
	minEvaluations     = 50_000
	evaluationsPerRule = 300
	// A path evaluates each rule about once per hook, a few times for chains many rules jump to
	// (KUBE-MARK-MASQ); pathStepsPerRule times the input's rules, plus minPerPath, is far past any path's need.
	pathStepsPerRule = 4
	minPerPath       = 1_000
	// maxPaths bounds the paths of one Run (random outcomes); their alternatives waiting to be walked are
	// bounded by it too.
	maxPaths = 4096
)

// bounds are what one Run may still spend.
type bounds struct {
	evaluations, maxEvaluations, perPath, rules int
	// cut is set once a walk stopped at a bound (or a loop): what it found is not the whole answer.
	cut bool
}

// Sized is a Ruleset that says how many rules it holds, which bounds the walk's work (see maxEvaluations).
type Sized interface {
	RuleCount() int
}

func newBounds(rulesets []Ruleset) *bounds {
	rules := 0
	for _, rs := range rulesets {
		if s, ok := rs.(Sized); ok {
			rules += s.RuleCount()
		}
	}
	b := &bounds{rules: rules, maxEvaluations: min(maxEvaluations, minEvaluations+evaluationsPerRule*rules), perPath: minPerPath + pathStepsPerRule*rules}
	b.evaluations = b.maxEvaluations
	return b
}

// AddRules grows the Run's bounds by n rules an engine read as the walk went (a ruleset read for one packet,
// inside its node): the bounds follow the input's size, and the input grew.
func (w *Walk) AddRules(n int) {
	b := w.budget
	b.rules += n
	grown := min(maxEvaluations, minEvaluations+evaluationsPerRule*b.rules)
	b.evaluations += grown - b.maxEvaluations
	b.maxEvaluations = grown
	b.perPath = minPerPath + pathStepsPerRule*b.rules
}

// alternative is a sequence of random choices a walk did not take, and its chance.
type alternative struct {
	script []int
	prob   float64
}

// Result is what Outcomes found.
type Result struct {
	Paths     []trace.Path
	Notes     []string
	Conntrack *trace.Conntrack
	// Unexplored is the chance of the random outcomes the walk did not reach, because it stopped at its bounds
	// (maxPaths, the rule evaluations): their verdicts and endpoints are not known, so Paths' probabilities add
	// up to 1 - Unexplored, and an endpoint's chance is at least what Paths give it.
	Unexplored float64
}

// Run walks flow through the rulesets and returns every path, one per sequence of random choices. Base chains
// run by priority, and, of equal priority, the later created first (see Creation). When the input does not
// say which of chains of equal priority was created first, the walk follows the order the rulesets and their
// tables were given in, and walks the other orders too: if they end differently, every path is unknown (the
// order decides, and the input does not tell it); if only the rules' order differs, a note says so.
func Run(rulesets []Ruleset, net *netstate.State, flow trace.Flow, origin Origin, names Names) ([]trace.Path, []string, *trace.Conntrack) {
	r := Outcomes(rulesets, net, flow, origin, names)
	return r.Paths, r.Notes, r.Conntrack
}

// Outcomes is Run with the chance of what it could not walk (Result.Unexplored), for callers that show chances.
func Outcomes(rulesets []Ruleset, net *netstate.State, flow trace.Flow, origin Origin, names Names) Result {
	b := newBounds(rulesets)
	var chains []BaseChain
	var owners []DNATOwner
	for _, rs := range rulesets {
		chains = append(chains, rs.BaseChains()...)
		if o, ok := rs.(DNATOwner); ok {
			owners = append(owners, o)
		}
	}
	p := order(chains)
	first := explore(p.flatten(), owners, net, flow, origin, names, nil, b)
	paths, notes, ct, ends := first.paths, first.notes, first.ct, first.ends
	unexplored := first.unexplored
	if alt, altNotes, ok := eitherWay(p.flatten(), owners, net, flow, origin, names, paths, first.facts, b); ok {
		paths, notes = alt, altNotes
	}
	for _, g := range p.open {
		hops, differ, cut := false, false, false
		for pick := 1; pick <= len(g.alts) && !differ && !cut; pick++ {
			g.pick = pick
			alt := explore(p.flatten(), owners, net, flow, origin, names, nil, b)
			switch {
			case alt.cut || first.cut:
				// A walk that stopped at the bounds is not the whole of its order: comparing would invent a
				// difference (or hide one).
				cut = true
			case !slices.Equal(alt.ends, ends):
				differ = true
			case !slices.Equal(walked(alt.paths), walked(paths)):
				hops = true
			}
		}
		g.pick = 0
		who, where, why := g.describe()
		switch {
		case cut:
			notes = append(notes, fmt.Sprintf("%s have %s, and the input does not say which was created last, which the kernel runs first (%s): the trace walks them in the order named; the other orders were not walked in full (the walk stopped at its bounds), so whether they end the same is not known", who, where, why))
		case differ:
			m := fmt.Sprintf("which of %s (%s) runs first: the kernel runs the one created last first, and the input does not say which that is (%s); the orders end differently for this packet", who, where, why)
			for i := range paths {
				paths[i].Missing = append(paths[i].Missing, m)
				paths[i].Verdict, paths[i].Endpoint, paths[i].SNAT, paths[i].Reply, paths[i].VerdictBy = trace.Unknown, nil, "", nil, nil
			}
		case hops:
			notes = append(notes, fmt.Sprintf("%s have %s, and the input does not say which was created last, which the kernel runs first (%s): the trace walks them in the order named; another order changes the order of their rules in the trace, not its outcome", who, where, why))
		}
	}
	return Result{Paths: paths, Notes: notes, Conntrack: ct, Unexplored: unexplored}
}

// walked are the paths with the rules they went through, sorted.
func walked(paths []trace.Path) []string {
	var out []string
	for _, p := range paths {
		var b strings.Builder
		for _, h := range p.Hops {
			fmt.Fprintf(&b, "%s %s %s %d %v %s|", h.Hook, h.Table, h.Chain, h.Rule, h.Matched, h.Verdict)
		}
		out = append(out, fmt.Sprintf("%.12g %s", p.Probability, b.String()))
	}
	slices.Sort(out)
	return out
}

// explored is what explore found. ends are what the paths end in, sorted: their outcomes and the packet as it
// is at the end, without the rules on the way; unexplored is the chance of the outcomes it did not walk; cut is
// set when a walk stopped at a bound (its path is unknown) or outcomes were left unwalked.
type explored struct {
	paths      []trace.Path
	notes      []string
	ct         *trace.Conntrack
	ends       []string
	facts      []string
	unexplored float64
	cut        bool
}

// explore walks flow through chains in the order given, once per sequence of random choices, within what b
// has left.
func explore(chains []placed, owners []DNATOwner, net *netstate.State, flow trace.Flow, origin Origin, names Names, suppose map[string]bool, b *bounds) (e explored) {
	cutBefore := b.cut
	b.cut = false
	defer func() {
		e.cut = e.cut || b.cut
		b.cut = b.cut || cutBefore
	}()
	queue := []alternative{{prob: 1}}
	// dropped is the chance of alternatives not even queued: more than maxPaths walks could ever take.
	dropped := 0.0
	for len(queue) > 0 && len(e.paths) < maxPaths {
		alt := queue[0]
		queue = queue[1:]
		if b.evaluations <= 0 {
			queue = append(queue, alt) // not walked: its chance is unexplored (the note below says why)
			break
		}
		w := &Walk{Net: net, Quiet: flow.Quiet, script: alt.script, prob: 1, natDone: map[string]bool{}, budget: b, owners: owners, suppose: suppose}
		w.Pkt = Packet{Src: flow.Src, Dst: flow.Dst, Sport: flow.Sport, Dport: flow.Dport, Proto: flow.Proto,
			Iif: origin.Iif, FromNode: origin.FromNode, New: true, CtState: []string{"NEW"}}
		p, c := w.run(chains, flow, names)
		e.paths = append(e.paths, p)
		ep := ""
		if p.Endpoint != nil {
			ep = p.Endpoint.Addr()
		}
		end := fmt.Sprintf("%.12g %s %s %s %s %q | %s:%d -> %s:%d mark %#x", p.Probability, p.Verdict, ep, p.SNAT, p.Egress, p.Missing,
			w.Pkt.Src, w.Pkt.Sport, w.Pkt.Dst, w.Pkt.Dport, w.Pkt.Mark)
		if p.VerdictBy != nil {
			// Dropped or rejected: the rule that did it is the end; what the packet carried then is not.
			end = fmt.Sprintf("%.12g %s by %s %q", p.Probability, p.Verdict, p.VerdictBy.Ref(), p.Missing)
		}
		e.ends = append(e.ends, end)
		for _, a := range w.alternatives {
			if len(queue)+len(e.paths) < maxPaths {
				queue = append(queue, a)
			} else {
				dropped += a.prob
			}
		}
		for _, f := range w.facts {
			if !contains(e.facts, f) {
				e.facts = append(e.facts, f)
			}
		}
		if c != nil {
			e.ct = c
		}
		for _, n := range w.notes {
			if !contains(e.notes, n) {
				e.notes = append(e.notes, n)
			}
		}
	}
	if len(queue) > 0 || dropped > 0 {
		e.cut = true
		e.unexplored = dropped
		for _, a := range queue {
			e.unexplored += a.prob
		}
		if len(e.paths) >= maxPaths {
			e.notes = append(e.notes, fmt.Sprintf("stopped after %d paths; more random outcomes exist (%s of new flows not explored)", maxPaths, percent(e.unexplored)))
		} else {
			e.notes = append(e.notes, fmt.Sprintf("stopped exploring paths: the rule-evaluation budget is spent (%s of new flows not explored)", percent(e.unexplored)))
		}
	}
	slices.Sort(e.ends)
	return e
}

// percent is a chance for a note: two decimals, or two significant digits when those would read 0.00%.
func percent(p float64) string { return trace.Percent(p) }

// maxFacts bounds the worlds eitherWay walks (2^maxFacts).
const maxFacts = 4

// eitherWay walks again, in every world of the facts the input lacks, a packet whose first walk ended unknown
// for want of them. When every world ends the same (the same outcomes, endpoints, sources and chances) and none
// is unknown, the input answers whatever the facts are: it returns the walk of the world where none holds, with a
// note that says so. ok is false when a world differs, is unknown, or there are too many facts to try.
func eitherWay(chains []placed, owners []DNATOwner, net *netstate.State, flow trace.Flow, origin Origin, names Names, paths []trace.Path, facts []string, b *bounds) ([]trace.Path, []string, bool) {
	if len(facts) == 0 || len(facts) > maxFacts || !slices.ContainsFunc(paths, func(p trace.Path) bool { return p.Verdict == trace.Unknown }) {
		return nil, nil, false
	}
	var first []trace.Path
	var firstNotes, firstEnds []string
	facts = slices.Clone(facts)
	for world := 0; world < 1<<len(facts); world++ {
		suppose := map[string]bool{}
		for i, f := range facts {
			suppose[f] = world&(1<<i) != 0
		}
		x := explore(chains, owners, net, flow, origin, names, suppose, b)
		wp, wn, we, wf := x.paths, x.notes, x.ends, x.facts
		if x.cut {
			return nil, nil, false // a world not walked in full answers nothing
		}
		if len(wf) > 0 {
			// A world that takes another way meets facts of its own: try every world of them all, afresh.
			facts = append(facts, wf...)
			if len(facts) > maxFacts {
				return nil, nil, false
			}
			world = -1
			continue
		}
		if slices.ContainsFunc(wp, func(p trace.Path) bool { return p.Verdict == trace.Unknown }) {
			return nil, nil, false // unknown for another reason
		}
		if world == 0 {
			first, firstNotes, firstEnds = wp, wn, we
		} else if !slices.Equal(we, firstEnds) {
			return nil, nil, false
		}
	}
	note := fmt.Sprintf("the input lacks %s, but the packet ends the same either way: the trace shows the walk where none of it holds", strings.Join(facts, "; and "))
	if len(facts) == 1 {
		note = fmt.Sprintf("the input lacks %s, but the packet ends the same either way: the trace shows the walk where it does not hold", facts[0])
	}
	return first, append(firstNotes, note), true
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func (w *Walk) run(chains []placed, flow trace.Flow, names Names) (trace.Path, *trace.Conntrack) {
	var ct *trace.Conntrack
	finish := func(verdict string) (trace.Path, *trace.Conntrack) {
		if len(w.missing) > 0 {
			verdict = trace.Unknown
		}
		if verdict == trace.Local && w.dnat != nil && w.Pkt.New && (w.dnat.Addr() != flow.Dst || w.dnat.Port() != flow.Dport && !w.redirected) {
			// A rule translated it to one of the node's own addresses (a hostNetwork endpoint, the apiserver
			// behind the kubernetes Service, an externalIP): delivered to that endpoint, on this node. The
			// address may be the one the packet came to, the port then tells (a NodePort on the node whose
			// hostNetwork pod is its endpoint: 172.18.0.3:31103 -> 172.18.0.3:8096).
			w.Note("the endpoint %s is an address of this node: the packet is delivered to its socket here", *w.dnat)
			verdict = trace.Delivered
		}
		p := trace.Path{Probability: w.prob, Hops: w.hops, Verdict: verdict, VerdictBy: w.verdictBy, Egress: w.egress, Missing: w.missing, Affinity: w.affinity, LocalOnly: w.localOnly}
		if verdict == trace.Delivered {
			p.SNAT = w.MasqueradedTo()
			if w.dnat != nil {
				e := &trace.Endpoint{IP: w.dnat.Addr().String(), Port: int(w.dnat.Port()), Turn: w.turn}
				if names != nil {
					e.Pod, e.Node = names(w.dnat.Addr())
				}
				p.Endpoint = e
			}
			p.Reply = w.reply(flow)
		}
		return p, ct
	}
	hook := func(h Hook) Verdict {
		w.Hook = h
		for _, c := range chains {
			if c.Hook != h {
				continue
			}
			if c.at >= PriorityConntrack && !w.ctDone {
				w.ctDone = true
				ct = w.lookupConntrack(flow)
			}
			w.applyPending(h, c.at)
			if c.NAT {
				kind := "dst"
				if h == Postrouting || h == Input {
					kind = "src"
				}
				if !w.Pkt.New || w.natDone[kind] {
					continue
				}
			}
			if v := c.Run(w); v != Accept {
				return v
			}
		}
		if !w.ctDone {
			w.ctDone = true
			ct = w.lookupConntrack(flow)
		}
		w.applyPending(h, 1<<30)
		return Accept
	}
	stop := func(v Verdict) (trace.Path, *trace.Conntrack) {
		if v == Unknown {
			if len(w.missing) == 0 {
				w.Missing("the rest of the walk")
			}
			w.verdictBy = nil
			return finish(trace.Unknown)
		}
		if v == Reject {
			return finish(trace.Rejected)
		}
		return finish(trace.Dropped)
	}

	if w.Pkt.FromNode {
		// The socket's route picks the source and first output interface.
		r, ok := w.Net.Lookup(w.Pkt.Dst)
		if w.Net.IsLocal(w.Pkt.Dst) {
			w.Pkt.Oif = "lo"
		} else if ok {
			w.Pkt.Oif = r.Dev
		}
		if v := hook(Output); v == Stolen {
			return w.resend(hook, stop, finish)
		} else if v != Accept {
			return stop(v)
		}
		// nat OUTPUT may have changed the destination: route again.
		if v, done := w.route(); done {
			return stop(v)
		}
		if v := hook(Postrouting); v != Accept {
			return stop(v)
		}
		if !w.Pkt.Local {
			return finish(trace.Delivered)
		}
		// A packet for the node itself loops through lo and comes in again: PREROUTING, then INPUT.
		w.Pkt.Iif = "lo"
		w.Pkt.New = false
		if v := hook(Prerouting); v != Accept {
			return stop(v)
		}
		if v := hook(Input); v != Accept {
			return stop(v)
		}
		return finish(trace.Local)
	}

	if v := hook(Prerouting); v != Accept {
		return stop(v)
	}
	if v, done := w.route(); done {
		return stop(v)
	}
	if w.Pkt.Local {
		if v := hook(Input); v == Stolen {
			return w.resend(hook, stop, finish)
		} else if v != Accept {
			return stop(v)
		}
		return finish(trace.Local)
	}
	if v := hook(Forward); v != Accept {
		return stop(v)
	}
	if v := hook(Postrouting); v != Accept {
		return stop(v)
	}
	return finish(trace.Delivered)
}

// resend follows a packet IPVS translated: routed to its new destination, through every LOCAL_OUT hook (nat
// OUTPUT does not run again: the flow's destination translation is set up), then POSTROUTING, where the
// source may be masqueraded.
func (w *Walk) resend(hook func(Hook) Verdict, stop func(Verdict) (trace.Path, *trace.Conntrack), finish func(string) (trace.Path, *trace.Conntrack)) (trace.Path, *trace.Conntrack) {
	w.Resent = true
	if v, done := w.route(); done {
		return stop(v)
	}
	if w.Pkt.Local {
		return finish(trace.Local)
	}
	if v := hook(Output); v != Accept {
		return stop(v)
	}
	if v := hook(Postrouting); v != Accept {
		return stop(v)
	}
	return finish(trace.Delivered)
}

// lookupConntrack applies an existing conntrack entry: the flow is not new, nat chains are skipped and the
// entry's translations apply.
func (w *Walk) lookupConntrack(flow trace.Flow) *trace.Conntrack {
	if flow.Sport == 0 {
		return nil
	}
	t := netstate.Tuple{Src: flow.Src, Dst: flow.Dst, Sport: flow.Sport, Dport: flow.Dport}
	e, dir, ok := w.Net.FindConntrack(flow.Proto, t)
	if !ok {
		return nil
	}
	w.Pkt.New = false
	w.Pkt.CtState = []string{"ESTABLISHED"}
	for _, s := range e.Status {
		if s == "UNREPLIED" {
			w.Pkt.CtState = []string{"NEW"}
		}
	}
	// The connection's status says which translations it has, whatever the packet's direction.
	dnat := e.Reply.Src != e.Orig.Dst || e.Reply.Sport != e.Orig.Dport
	snat := e.Reply.Dst != e.Orig.Src || e.Reply.Dport != e.Orig.Sport
	if dnat {
		w.Pkt.CtState = appendState(w.Pkt.CtState, "DNAT")
	}
	if snat {
		w.Pkt.CtState = appendState(w.Pkt.CtState, "SNAT")
	}
	// The translations themselves happen where the kernel does them: the destination at the dstnat point
	// (after raw, mangle and anything before priority -100), the source at the srcnat point.
	if dir == "original" && dnat && w.ownedDNAT(flow) {
		dnat = false // its owner (IPVS) rewrites the destination at its own hook
	}
	if dir == "original" {
		if dnat {
			d := netip.AddrPortFrom(e.Reply.Src, e.Reply.Sport)
			w.pendingDst = &d
		}
		if snat {
			w.pendingSrc = e.Reply.Dst
		}
	} else {
		if snat {
			d := netip.AddrPortFrom(e.Orig.Src, e.Orig.Sport)
			w.pendingDst = &d
		}
		if dnat {
			w.pendingSrc = e.Orig.Dst
		}
	}
	w.Note("an existing conntrack entry decides this flow: nat rules are not consulted for it")
	return &trace.Conntrack{Entry: e.Line, Direction: dir}
}

func (w *Walk) ownedDNAT(f trace.Flow) bool {
	client, dst := netip.AddrPortFrom(f.Src, f.Sport), netip.AddrPortFrom(f.Dst, f.Dport)
	for _, o := range w.owners {
		if o.OwnsDNAT(f.Proto, client, dst) {
			return true
		}
	}
	return false
}

// applyPending applies an established flow's translations once the walk reaches the priority where the
// kernel's nat hooks do it.
func (w *Walk) applyPending(h Hook, priority int) {
	if w.pendingDst != nil && (h == Prerouting || h == Output) && priority >= PriorityDstNAT {
		d := *w.pendingDst
		w.pendingDst = nil
		w.Pkt.Dst, w.Pkt.Dport = d.Addr(), d.Port()
		w.dnat = &d
	}
	if w.pendingSrc.IsValid() && (h == Postrouting || h == Input) && priority >= PrioritySrcNAT {
		w.Pkt.Src = w.pendingSrc
		w.snat = w.pendingSrc
		w.pendingSrc = netip.Addr{}
	}
}

// route makes the routing decision for the packet's (possibly translated) destination.
func (w *Walk) route() (Verdict, bool) {
	dst := w.Pkt.Dst
	if w.redirected || w.Net.IsLocal(dst) {
		// A redirect's address is one of the node's by construction (nf_nat_redirect), said or not.
		w.Pkt.Local = true
		w.Pkt.Oif = "lo"
		w.egress = "local delivery on the node"
		return Accept, false
	}
	w.Pkt.Local = false
	if dst.IsLoopback() {
		w.Note("%s is a loopback address that no local route covers: the kernel drops it", dst)
		return Drop, true
	}
	if !w.Pkt.FromNode && strings.HasPrefix(w.Pkt.Src.String(), "127.") {
		w.Note("a packet from a loopback source arriving from outside is a martian: the kernel drops it")
		return Drop, true
	}
	// IPVS routes what it translates as the node's own output: forwarding is not asked.
	if !w.Pkt.FromNode && !w.Resent && w.Net.Sysctls["net.ipv4.ip_forward"] == "0" {
		w.Note("net.ipv4.ip_forward is 0 on this node: it does not forward")
		return Drop, true
	}
	r, ok := w.Net.Lookup(dst)
	if !ok {
		w.Note("no route to %s on this node", dst)
		w.egress = "no route"
		return Drop, true
	}
	w.Pkt.Oif = r.Dev
	if r.Gateway.IsValid() {
		w.egress = fmt.Sprintf("%s via %s", r.Dev, r.Gateway)
	} else {
		w.egress = fmt.Sprintf("%s (directly connected %s)", r.Dev, r.Dst)
	}
	return Accept, false
}

// replyBypasses tells whether the endpoint's reply goes around this node: the packet came in on an interface
// and was translated to an endpoint behind a gateway on that same interface (a pod on another node), still
// carrying a source this node reaches through that interface too (the source was kept: a NodePort with
// externalTrafficPolicy Local, which IPVS mode sends to other nodes' pods when this one has none). The gateway,
// on the same network, reaches the source the same way, and the reply never meets the conntrack or IPVS entry
// that would undo the DNAT.
func (w *Walk) replyBypasses() bool {
	if w.dnat == nil || w.Pkt.FromNode || w.Pkt.Iif == "" || w.Pkt.Iif != w.Pkt.Oif || w.Net.IsLocal(w.Pkt.Src) {
		return false
	}
	toEndpoint, ok := w.Net.Lookup(w.Pkt.Dst)
	if !ok || !toEndpoint.Gateway.IsValid() {
		return false
	}
	toSource, ok := w.Net.Lookup(w.Pkt.Src)
	return ok && toSource.Dev == toEndpoint.Dev
}

// reply describes the way back: conntrack undoes DNAT and SNAT on the endpoint's answer.
func (w *Walk) reply(flow trace.Flow) *trace.Reply {
	port := func(p uint16) string {
		if p == 0 {
			return "PORT"
		}
		return fmt.Sprint(p)
	}
	srcPort := port(flow.Sport)
	replyTo := fmt.Sprintf("%s:%s", w.MasqueradedTo(), srcPort)
	if w.masqRandomPort {
		replyTo = fmt.Sprintf("%s:%s", w.MasqueradedTo(), "PORT'")
	}
	if w.srcUnknown != "" {
		replyTo = trace.Unknown
	}
	r := &trace.Reply{
		From:       netip.AddrPortFrom(w.Pkt.Dst, w.Pkt.Dport).String(),
		To:         replyTo,
		AsSeenFrom: netip.AddrPortFrom(flow.Dst, flow.Dport).String(),
		AsSeenTo:   fmt.Sprintf("%s:%s", flow.Src, srcPort),
	}
	var undo []string
	if w.snat.IsValid() {
		how := "SNAT"
		if w.masq {
			how = w.masqHow
			if w.masqRandomPort {
				how += " (port PORT' chosen at random)"
			}
		}
		undo = append(undo, fmt.Sprintf("the destination back to %s (undoing %s)", r.AsSeenTo, how))
	}
	if w.srcUnknown != "" {
		// Whether the node masqueraded the packet is not known, so neither is where the pod answers, nor whether
		// that answer can come back through this node (replyBypasses needs the source the pod saw).
		what := "conntrack turns"
		if w.dnat != nil && w.reverseNAT != "" {
			what = "conntrack (undoing any masquerade) and " + w.reverseNAT + " turn"
		}
		r.Text = fmt.Sprintf("the pod at %s answers the source it saw, which the input does not tell; back through this node, %s the reply into %s -> %s", r.From, what, r.AsSeenFrom, r.AsSeenTo)
		r.UndoneBy = []string{"conntrack"}
		if w.dnat != nil && w.reverseNAT != "" {
			r.UndoneBy = append(r.UndoneBy, w.reverseNATName)
		}
		return r
	}
	if w.replyBypasses() {
		r.Bypasses = true
		r.Text = fmt.Sprintf("the reply %s -> %s does not come back through this node: the endpoint's node has %s on its own network (%s, the network the packet came in on) and sends the reply straight to it, from the pod's address, which nothing translates back; the client drops it and the connection fails", r.From, r.To, w.Pkt.Src, w.Pkt.Oif)
		return r
	}
	if w.dnat != nil && w.reverseNAT != "" {
		// Conntrack undoes only the masquerade; the DNAT was IPVS's, and so is its undoing.
		ct := "needs no conntrack translation"
		if len(undo) > 0 {
			ct = "matches the flow's conntrack entry, which rewrites " + undo[0]
			r.UndoneBy = []string{"conntrack"}
		}
		r.UndoneBy = append(r.UndoneBy, w.reverseNATName)
		r.Text = fmt.Sprintf("the reply %s -> %s %s; then %s rewrites the source back to %s", r.From, r.To, ct, w.reverseNAT, r.AsSeenFrom)
		return r
	}
	if w.dnat != nil {
		undo = append(undo, fmt.Sprintf("the source back to %s (undoing the DNAT)", r.AsSeenFrom))
	}
	if len(undo) == 0 {
		r.Text = fmt.Sprintf("the reply %s -> %s needs no translation", r.From, r.To)
	} else {
		r.Text = fmt.Sprintf("the reply %s -> %s matches the flow's conntrack entry, which rewrites %s", r.From, r.To, strings.Join(undo, " and "))
		r.UndoneBy = []string{"conntrack"}
	}
	return r
}

// TraceTablePrefix starts the name of the nftables table `trace --verify` adds to a node to turn on tracing for
// one flow (k8sguide-trace-PORT). Every engine leaves such tables out of the walk: the tracer's own rules never
// appear in a prediction.
const TraceTablePrefix = "k8sguide-trace"

// XtablesTables are the tables iptables-nft and ip6tables-nft make in nf_tables (families ip and ip6): on a node
// whose iptables rules are read with iptables-save, their rules belong to the iptables engine.
var XtablesTables = []string{"filter", "nat", "mangle", "raw", "security"}
