package live

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/engines"
	"github.com/k8sguide/k8sguide/dataplanes/netstate"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/tracer"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/nodecmd"
)

// MinExpected is the smallest number of answers an endpoint is expected to get for the chi-square verdict to
// be given (the usual rule of thumb for Pearson's test).
const MinExpected = 5

// Count traces req's packet on node, reads the kernel's records of its endpoint choices (the engine's Live face
// says which it keeps), makes n connections like it from the client (parallel at a time), reads the records
// again and puts what they and the answers say beside the trace's chances.
func Count(ctx context.Context, p lab.Provider, name, node string, req tracer.Request, n, parallel int) (*trace.Counted, error) {
	t, _, err := Trace(ctx, p, name, node, req)
	if err != nil {
		return nil, err
	}
	st, err := p.Status(ctx, name)
	if err != nil {
		return nil, err
	}
	c := &trace.Counted{Node: node, Dst: req.Dst, Dataplane: string(st.Dataplane), Made: n}
	for _, path := range t.Paths {
		if path.Endpoint != nil && !slices.ContainsFunc(c.Endpoints, func(e trace.CountedEndpoint) bool {
			return e.Endpoint.IP == path.Endpoint.IP && e.Endpoint.Port == path.Endpoint.Port
		}) {
			c.Endpoints = append(c.Endpoints, trace.CountedEndpoint{Endpoint: *path.Endpoint})
		}
	}
	if len(c.Endpoints) == 0 {
		return nil, fmt.Errorf("the trace of %s on %s reaches no endpoint (trace --dst %s --node %s says why): nothing to count", req.Dst, node, req.Dst, node)
	}
	face, ok := engines.Live(st.Dataplane)
	if !ok {
		return nil, fmt.Errorf("dataplane %q is not one this k8sguide knows: it cannot say where its choices are recorded", st.Dataplane)
	}
	at := where{p: p, name: name, node: node, st: st, dst: req.Dst}
	records := recordsOf(face, t, at, c)
	for i, r := range records {
		if err := r.before(ctx); err != nil {
			if _, ok := r.(*conntrackRecord); !ok {
				return nil, err
			}
			// The counts stand without it: the answers and the other records still say.
			c.Notes = append(c.Notes, "the node's conntrack table was not read: "+err.Error())
			records[i] = nil
		}
	}
	// The run's connections leave from source ports no record held an entry of before it, so that what the
	// records hold of those ports afterwards is the run's and nothing else's. (With the kernel's choice of port a
	// connection could reuse the port of an earlier one still in TIME_WAIT: conntrack then replaces that entry,
	// often at the same address and so with the same id, and the run's entry passed for the old one: in the IPVS
	// test VM a pod answered 20 connections and 19 new entries were counted.)
	avoid := map[uint16]bool{}
	for _, r := range records {
		if r != nil {
			r.portsBefore(avoid)
		}
	}
	sports := freshPorts(n, avoid)
	var run map[uint16]bool // nil: the kernel chose the ports
	if sports != nil {
		run = map[uint16]bool{}
		for _, p := range sports {
			run[p] = true
		}
	}
	conns, err := connections(ctx, p, name, "client", node, req.Dst, n, parallel, sports)
	if err != nil {
		return nil, err
	}
	c.Made = len(conns)
	for _, conn := range conns {
		if !conn.Answered {
			continue
		}
		c.Answered++
		for i, e := range c.Endpoints {
			if _, pod, _ := strings.Cut(e.Endpoint.Pod, "/"); pod == conn.Pod || e.Endpoint.Pod == conn.Pod {
				c.Endpoints[i].Answered++
			}
		}
	}
	for _, r := range records {
		if r != nil {
			if err := r.after(ctx, c, run); err != nil {
				return nil, err
			}
		}
	}
	conclude(c)
	return c, nil
}

// where is the node a count is made on, and the packet's destination.
type where struct {
	p          lab.Provider
	name, node string
	st         lab.Status
	dst        string
}

// record is one of the kernel's records of the run's choices, read before the connections and after; after adds
// what the run left in it to c (run: the client ports the run's connections left from; nil when the kernel chose).
type record interface {
	before(ctx context.Context) error
	// portsBefore adds to avoid the client ports of the entries before read.
	portsBefore(avoid map[uint16]bool)
	after(ctx context.Context, c *trace.Counted, run map[uint16]bool) error
}

// The client ports a --verify or counters connection leaves from when it picks its own:
// [firstOwnPort, firstOwnPort+ownPorts).
const (
	firstOwnPort = 40000
	ownPorts     = 20000
)

// freshPorts are n distinct client ports of that range, none of them in avoid, in random order; nil when there are
// not n of them (the kernel then chooses).
func freshPorts(n int, avoid map[uint16]bool) []uint16 {
	var free []uint16
	for p := uint16(firstOwnPort); p < firstOwnPort+ownPorts; p++ {
		if !avoid[p] {
			free = append(free, p)
		}
	}
	if n > len(free) {
		return nil
	}
	for i := range n { // the first n of a Fisher-Yates shuffle
		j := i + rand.IntN(len(free)-i)
		free[i], free[j] = free[j], free[i]
	}
	return free[:n]
}

// recordsOf are the records face says its engine keeps, for the trace t: its rules' packet counters, the node's
// conntrack entries, its own record; c gets face's note when the rules keep no count.
func recordsOf(face dataplanes.Live, t *trace.Trace, at where, c *trace.Counted) []record {
	var out []record
	if face.CountingTable != "" {
		if rules, chain := choiceRules(t, face.CountingTable); chain != "" {
			out = append(out, &ruleCounters{where: at, table: face.CountingTable, chain: chain, rules: rules})
		}
	} else if face.NoCounts != "" {
		c.Notes = append(c.Notes, face.NoCounts)
	}
	if face.Choices != nil {
		out = append(out, &ownRecord{where: at, face: face})
	}
	if face.Conntrack {
		out = append(out, &conntrackRecord{where: at})
	}
	return out
}

// ruleCounters are the packet counters of the rules where the trace's paths part (iptables' statistic cascade),
// read in the node with go-iptables.
type ruleCounters struct {
	where
	table, chain string
	rules        []trace.CountedRule
	first        map[string][]uint64
}

// A rule's counters count packets, not ports.
func (r *ruleCounters) portsBefore(map[uint16]bool) {}

func (r *ruleCounters) read(ctx context.Context) (map[string][]uint64, error) {
	exe, err := r.p.ToolPath(ctx, r.name, r.node)
	if err != nil {
		return nil, err
	}
	return nodecmd.IPTablesCounters(ctx, execIn(r.p, r.name, r.node), exe, r.table, []string{r.chain})
}

func (r *ruleCounters) before(ctx context.Context) (err error) {
	r.first, err = r.read(ctx)
	return err
}

func (r *ruleCounters) after(ctx context.Context, c *trace.Counted, _ map[uint16]bool) error {
	last, err := r.read(ctx)
	if err != nil {
		return err
	}
	rules, chain := r.rules, r.chain
	for i := range rules {
		if n := rules[i].Rule - 1; n < len(r.first[chain]) && n < len(last[chain]) {
			rules[i].Before, rules[i].After = r.first[chain][n], last[chain][n]
		}
	}
	for i := len(rules) - 1; i >= 0; i-- {
		rules[i].Reached = rules[i].Counted()
		if i+1 < len(rules) {
			rules[i].Reached += rules[i+1].Reached
		}
	}
	c.Rules = rules
	if len(rules) > 0 && rules[0].Reached != uint64(c.Made) {
		c.Notes = append(c.Notes, fmt.Sprintf("the kernel counted %d packets into %s for %d connections: %s rules see a connection's first packet only, and other traffic to the Service counts too", rules[0].Reached, chain, c.Made, r.table))
	}
	return nil
}

// conntrackRecord is the node's conntrack entries from the client to dst, whose reply source is the endpoint
// each connection was sent to (the netfilter dataplanes' record of each choice).
type conntrackRecord struct {
	where
	seen map[string]bool
	// ports are the client ports of the entries read before the run.
	ports map[uint16]bool
}

func (r *conntrackRecord) before(ctx context.Context) (err error) {
	r.seen, r.ports, err = conntrackTo(ctx, r.p, r.name, r.node, r.st.Client, r.dst)
	return err
}

func (r *conntrackRecord) portsBefore(avoid map[uint16]bool) {
	for p := range r.ports {
		avoid[p] = true
	}
}

func (r *conntrackRecord) after(ctx context.Context, c *trace.Counted, run map[uint16]bool) error {
	entries, err := conntrackEntries(ctx, r.p, r.name, r.node, r.st.Client, r.dst)
	if err != nil {
		return err
	}
	var chosen []netip.AddrPort
	for _, e := range entries {
		// The run's entries: those of its own client ports, which no entry had before it; with ports of the
		// kernel's choice, those whose id was not there before.
		if run != nil && run[e.Orig.Sport] || run == nil && !r.seen[conntrackID(e)] {
			chosen = append(chosen, netip.AddrPortFrom(e.Reply.Src, e.Reply.Sport))
		}
	}
	recordChoices(c, chosen, fmt.Sprintf("the run's new entries in %s's conntrack table, each replied to by the endpoint the rules sent it to", r.node))
	return nil
}

// ownRecord is the engine's own record of its choices (Cilium's conntrack map), read from the node's part.
type ownRecord struct {
	where
	face  dataplanes.Live
	first map[uint16]dataplanes.Choice
}

func (r *ownRecord) portsBefore(avoid map[uint16]bool) {
	for p := range r.first {
		avoid[p] = true
	}
}

func (r *ownRecord) read(ctx context.Context) (map[uint16]dataplanes.Choice, error) {
	s, err := collect(ctx, r.p, r.name, r.st, r.node, "")
	if err != nil {
		return nil, err
	}
	client, err := netip.ParseAddr(r.st.Client)
	if err != nil {
		return nil, fmt.Errorf("the lab's client address %q: %v", r.st.Client, err)
	}
	frontend, err := netip.ParseAddrPort(r.dst)
	if err != nil {
		return nil, err
	}
	return r.face.Choices(s.Part(r.st.Dataplane), client, frontend)
}

func (r *ownRecord) before(ctx context.Context) (err error) {
	r.first, err = r.read(ctx)
	return err
}

func (r *ownRecord) after(ctx context.Context, c *trace.Counted, run map[uint16]bool) error {
	last, err := r.read(ctx)
	if err != nil {
		return err
	}
	var chosen []netip.AddrPort
	for sport, choice := range last {
		if run != nil {
			// The run's own client ports, which no entry had before it.
			if run[sport] {
				chosen = append(chosen, choice.Backend)
			}
			continue
		}
		// An entry of the same client port from before the run is new when the run touched it (a connection
		// of the run reused the port: the datapath renewed the entry's lifetime).
		if old, ok := r.first[sport]; !ok || old != choice {
			chosen = append(chosen, choice.Backend)
		}
	}
	recordChoices(c, chosen, r.face.Record)
	return nil
}

// choiceRules are the rules of the chain of table where the trace's paths part for their endpoints (kube-proxy's
// KUBE-SVC-… or KUBE-SVL-… statistic cascade, in nat): for each path, the rule of that chain it matched.
func choiceRules(t *trace.Trace, table string) ([]trace.CountedRule, string) {
	chain := ""
	for _, path := range t.Paths {
		for _, h := range path.Hops {
			if h.Probability > 0 && h.Table == table && chain == "" {
				chain = h.Chain
			}
		}
	}
	if chain == "" {
		return nil, ""
	}
	var rules []trace.CountedRule
	for _, path := range t.Paths {
		if path.Endpoint == nil {
			continue
		}
		for _, h := range path.Hops {
			if h.Chain != chain || !h.Matched || h.Rule == 0 {
				continue
			}
			if slices.ContainsFunc(rules, func(r trace.CountedRule) bool { return r.Rule == h.Rule }) {
				break
			}
			chance := h.Probability
			if chance == 0 {
				chance = 1 // the last rule: what no statistic match took
			}
			ep := path.Endpoint.Pod
			if ep == "" {
				ep = fmt.Sprintf("%s:%d", path.Endpoint.IP, path.Endpoint.Port)
			}
			rules = append(rules, trace.CountedRule{Chain: chain, Rule: h.Rule, Text: h.Text, Chance: chance, Endpoint: ep})
			break
		}
	}
	slices.SortFunc(rules, func(a, b trace.CountedRule) int { return a.Rule - b.Rule })
	return rules, chain
}

// recordChoices sets each endpoint's count of the kernel's records (chosen: the endpoint of each of the run's
// new entries) and says which record they come from.
func recordChoices(c *trace.Counted, chosen []netip.AddrPort, record string) {
	counts := make([]int, len(c.Endpoints))
	for _, to := range chosen {
		for i, ep := range c.Endpoints {
			if to.String() == ep.Endpoint.Addr() {
				counts[i]++
			}
		}
	}
	for i := range c.Endpoints {
		c.Endpoints[i].Conntrack = &counts[i]
	}
	c.ConntrackRecord = record
}

// conclude computes the chi-square test of the answers against the trace's chances and says what it supports.
func conclude(c *trace.Counted) {
	c.DF = len(c.Endpoints) - 1
	if c.Answered == 0 {
		c.Verdict = "no connection was answered: nothing to compare with the trace's chances"
		return
	}
	smallest := float64(c.Answered)
	for _, e := range c.Endpoints {
		want := float64(c.Answered) * e.Endpoint.Probability
		smallest = min(smallest, want)
		if want > 0 {
			d := float64(e.Answered) - want
			c.ChiSquare += d * d / want
		} else if e.Answered > 0 {
			c.Verdict = fmt.Sprintf("%s answered %d connections, where the trace gives it no chance: the trace is wrong", e.Endpoint.Pod, e.Answered)
			return
		}
	}
	if c.DF == 0 {
		c.P = 1
		c.Verdict = "one endpoint: every answered connection went to it, as the trace says"
		return
	}
	c.P = distuv.ChiSquared{K: float64(c.DF)}.Survival(c.ChiSquare)
	switch {
	case smallest < MinExpected:
		c.Verdict = fmt.Sprintf("too few connections to tell: an endpoint expects %.1f answers; make at least %d", smallest, needed(c))
	case c.P >= 0.01:
		c.Verdict = fmt.Sprintf("the answers fit the trace's chances (chi-square %.2f on %d degrees of freedom, p = %.2f)", c.ChiSquare, c.DF, c.P)
	default:
		c.Verdict = fmt.Sprintf("the answers do not fit the trace's chances (chi-square %.2f on %d degrees of freedom, p = %.4f < 0.01)", c.ChiSquare, c.DF, c.P)
	}
}

// needed is how many connections make every endpoint expect MinExpected answers.
func needed(c *trace.Counted) int {
	least := 1.0
	for _, e := range c.Endpoints {
		if e.Endpoint.Probability > 0 {
			least = min(least, e.Endpoint.Probability)
		}
	}
	return int(float64(MinExpected)/least + 0.999)
}

// conntrackEntries are the node's TCP conntrack entries of connections from client to dst (IP:PORT), read with
// conntrack-tools in the node, with their ids (-o id): a connection of the run may reuse the client port of an
// entry from before it (in the IPVS test VM, one of 60 did), so the tuple does not tell a new entry.
func conntrackEntries(ctx context.Context, p lab.Provider, name, node, client, dst string) ([]netstate.ConntrackEntry, error) {
	ap, err := netip.ParseAddrPort(dst)
	if err != nil {
		return nil, err
	}
	var out, errb strings.Builder
	argv := []string{"conntrack", "-L", "-p", "tcp", "--orig-src", client, "--orig-dst", ap.Addr().String(), "--dport", strconv.Itoa(int(ap.Port())), "-o", "id"}
	if err := p.Exec(ctx, name, node, argv, lab.Streams{Out: &out, Err: &errb}); err != nil {
		return nil, fmt.Errorf("%s: %s", strings.Join(argv, " "), lab.FirstLine(errb.String()+" "+err.Error()))
	}
	var entries []netstate.ConntrackEntry
	for _, line := range strings.Split(out.String(), "\n") {
		if e, ok := netstate.ParseConntrack(line); ok {
			entries = append(entries, e)
		}
	}
	return entries, nil
}

// conntrackTo is the set of conntrackEntries' ids and that of their client ports: what a run's new entries are
// told from.
func conntrackTo(ctx context.Context, p lab.Provider, name, node, client, dst string) (map[string]bool, map[uint16]bool, error) {
	entries, err := conntrackEntries(ctx, p, name, node, client, dst)
	if err != nil {
		return nil, nil, err
	}
	seen, ports := map[string]bool{}, map[uint16]bool{}
	for _, e := range entries {
		seen[conntrackID(e)] = true
		ports[e.Orig.Sport] = true
	}
	return seen, ports, nil
}

// conntrackID is the kernel's id of a conntrack entry (conntrack -o id), or its line when it has none.
func conntrackID(e netstate.ConntrackEntry) string {
	for _, w := range strings.Fields(e.Line) {
		if id, ok := strings.CutPrefix(w, "id="); ok {
			return id
		}
	}
	return e.Line
}
