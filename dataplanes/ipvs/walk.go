package ipvs

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// Where IPVS sits among the netfilter hooks (net/netfilter/ipvs/ip_vs_core.c, ip_vs_ops4): it schedules
// packets for the node in LOCAL_IN just before nat INPUT (NF_IP_PRI_NAT_SRC - 1), after filter INPUT has
// accepted them, and packets the node makes in LOCAL_OUT just after nat OUTPUT (NF_IP_PRI_NAT_DST + 2).
const (
	priorityRemoteRequest = netfilter.PrioritySrcNAT - 1
	priorityLocalRequest  = netfilter.PriorityDstNAT + 2
)

// Table is what trace hops name as the IPVS "table".
const Table = "ipvs"

// Ruleset is a node's IPVS table as the netfilter walk sees it.
type Ruleset struct {
	State *State
	// MasqueradeUnknown is set when the input has the IPVS table but not the nat rules that masquerade what IPVS
	// translates (a pasted ipvsadm listing alone): kube-proxy's IPVS mode masquerades NodePort traffic, traffic to
	// a Service from outside the cluster CIDR and, with --masquerade-all, everything, with its iptables rules
	// (KUBE-MARK-MASQ on its ipsets, then KUBE-POSTROUTING), so the source a real server sees is not known.
	MasqueradeUnknown bool
}

// BaseChains are IPVS's two scheduling hooks, and, for a listing that printed virtual servers by name, a check
// before the routing decision (see namedVirtualServer).
func (r *Ruleset) BaseChains() []netfilter.BaseChain {
	chains := []netfilter.BaseChain{
		{Hook: netfilter.Input, Priority: priorityRemoteRequest, Table: Table, Name: "ip_vs_remote_request4", OrderUnknown: ipvsOrder, Run: r.schedule},
		{Hook: netfilter.Output, Priority: priorityLocalRequest, Table: Table, Name: "ip_vs_local_request4", OrderUnknown: ipvsOrder, Run: r.schedule},
	}
	for _, v := range r.State.Services {
		if v.NoAddress {
			chains = append(chains, netfilter.BaseChain{Hook: netfilter.Prerouting, Priority: priorityNamedCheck, Table: Table, Name: "virtual servers printed by name", StandIn: true, Run: r.namedVirtualServer})
			break
		}
	}
	return chains
}

// ipvsOrder says why the place of IPVS's hooks among chains of their priority is not known.
const ipvsOrder = "IPVS registers its hooks when the namespace's first virtual server is added, which no listing shows"

// priorityNamedCheck runs the check after nat PREROUTING, on the destination routing will decide on. It is not
// a kernel hook: it stands for the addresses kube-ipvs0 holds, which a listing with names does not show.
const priorityNamedCheck = netfilter.PriorityFilter

// namedVirtualServer stops a packet from outside whose destination is not known to be the node's but may be the
// address of a virtual server the listing printed by name: kube-proxy binds that address on kube-ipvs0, which
// makes the packet the node's (INPUT, where IPVS takes it); otherwise it is forwarded. Which one is not known.
func (r *Ruleset) namedVirtualServer(w *netfilter.Walk) netfilter.Verdict {
	p := &w.Pkt
	if w.Resent || p.FromNode || w.Net.IsLocal(p.Dst) {
		return netfilter.Accept
	}
	named := r.State.Unresolved(p.Proto, p.Dst, p.Dport)
	if len(named) == 0 {
		return netfilter.Accept
	}
	dst := netip.AddrPortFrom(p.Dst, p.Dport)
	w.Add(trace.Hop{Table: Table, Chain: "virtual servers", Text: fmt.Sprintf("%s %s", strings.ToUpper(p.Proto), dst),
		Reason: fmt.Sprintf("%s may be the address of %s, which kube-proxy binds on kube-ipvs0: the packet is then the node's, and IPVS takes it; otherwise it is forwarded", p.Dst, namedList(named))})
	missingNamed(w, named)
	return netfilter.Unknown
}

// namedList names virtual servers as the listing printed them, the first few of them.
func namedList(vs []*VirtualServer) string {
	const most = 3
	var s []string
	for i, v := range vs {
		if i == most {
			s = append(s, fmt.Sprintf("and %d more", len(vs)-most))
			break
		}
		s = append(s, v.As)
	}
	if len(vs) == 1 {
		return "virtual server " + s[0]
	}
	return fmt.Sprintf("one of the virtual servers %s", strings.Join(s, ", "))
}

// missingNamed records what a listing with names lacks for this packet.
func missingNamed(w *netfilter.Walk, vs []*VirtualServer) {
	if len(vs) == 1 {
		w.Missing("the %s of virtual server %s: %s", vs[0].Unresolved(), vs[0].As, vs[0].why())
		return
	}
	var names []string
	for _, v := range vs {
		names = append(names, v.As)
	}
	if len(names) > 4 {
		names = append(names[:3], fmt.Sprintf("and %d more", len(names)-3))
	}
	w.Missing("the addresses and ports of the virtual servers `ipvsadm -L` printed by name (%s): any of them may be the packet's destination; paste `ipvsadm -Ln`", strings.Join(names, ", "))
}

// schedule is what IPVS does with a packet on its way in: find the virtual server, pick a real server for a
// new connection (or the one an existing entry names), and for Masq forwarding rewrite the destination and
// send the packet on itself.
func (r *Ruleset) schedule(w *netfilter.Walk) netfilter.Verdict {
	p := &w.Pkt
	if w.Resent || (p.Proto != "tcp" && p.Proto != "udp" && p.Proto != "sctp") {
		return netfilter.Accept
	}
	dst := netip.AddrPortFrom(p.Dst, p.Dport)
	v := r.State.Find(p.Proto, p.Dst, p.Dport, p.Mark)
	if named := r.State.Unresolved(p.Proto, p.Dst, p.Dport); (v == nil || v.FWMark != 0) && len(named) > 0 {
		// A virtual server the listing printed by name may be this one: IPVS takes the packet if so (and looks
		// services up by address before it looks at firewall marks).
		w.Add(trace.Hop{Table: Table, Chain: "virtual servers", Text: fmt.Sprintf("%s %s", strings.ToUpper(p.Proto), dst),
			Reason: fmt.Sprintf("no virtual server the listing gives by address is %s %s, but it may be %s", strings.ToUpper(p.Proto), dst, namedList(named))})
		missingNamed(w, named)
		return netfilter.Unknown
	}
	if v == nil {
		h := trace.Hop{Table: Table, Chain: "virtual servers", Text: fmt.Sprintf("%s %s", strings.ToUpper(p.Proto), dst),
			Reason: fmt.Sprintf("no IPVS virtual server for %s %s: the packet goes on to the node's own sockets", strings.ToUpper(p.Proto), dst)}
		if r.State.Cut {
			w.Note("assumed: the IPVS listing ends where the paste does (taken as whole; if the paste was cut, a virtual server for %s %s may follow its last line)", strings.ToUpper(p.Proto), dst)
		}
		w.Add(h)
		return netfilter.Accept
	}
	vh := trace.Hop{Table: Table, Chain: v.Name(), Text: v.Name(), Matched: true,
		Reason: fmt.Sprintf("IPVS virtual server for %s (one per address the Service answers on)", dst)}
	vh.Does(trace.StageService, "IPVS virtual server "+strings.Join(strings.Fields(v.Name()), " "), "")
	w.Add(vh)
	if r.State.Cut && v == &r.State.Services[len(r.State.Services)-1] {
		// ipvsadm prints no end mark: a listing that ends with the paste is read as whole, and the trace
		// says so, for the chances hold only if it is.
		w.Note("assumed: the IPVS listing ends where the paste does: %s, its last virtual server, has the real servers shown (if the paste was cut, it may have more, and each one's chance is smaller)", v.Name())
	}

	client := netip.AddrPortFrom(p.Src, p.Sport)
	if rs, why := r.decided(v, client); rs != nil {
		return r.forward(w, v, rs, 1, why, -1)
	}
	if v.Persistent {
		from := "the same client address"
		if v.PersistMask != "" {
			from = fmt.Sprintf("the same client network (mask %s)", v.PersistMask)
		}
		w.Note("persistent %d: IPVS sends every connection from %s to the same real server for %d s after the last one (a persistence template), so a client that connected before goes where it went then, not by %s",
			v.Timeout, from, v.Timeout, v.Scheduler)
	}
	avail, probs, why, turns := choices(v)
	if len(avail) == 0 {
		h := trace.Hop{Table: Table, Chain: v.Name(), Text: v.Name(), Verdict: "reject",
			Reason: "no real server with a weight above 0: IPVS answers a new connection with ICMP port unreachable (ip_vs_leave)"}
		w.Add(h)
		w.VerdictBy(h)
		return netfilter.Reject
	}
	i := w.Choose(probs)
	turn := 0
	if turns != nil {
		turn = turns[i]
		w.EndpointTurn(turn)
	}
	return r.forward(w, v, &v.RealServers[avail[i]], probs[i], why[i], turn)
}

// decided returns the real server an existing connection entry (or, for a persistent service, the client's
// persistence template) sends the packet to.
func (r *Ruleset) decided(v *VirtualServer, client netip.AddrPort) (*RealServer, string) {
	vip := v.Addr()
	if client.Port() != 0 {
		if c, ok := r.State.Connection(v.Protocol, client, vip); ok {
			if rs := v.realServer(c.Dest); rs != nil {
				return rs, fmt.Sprintf("an existing IPVS connection entry (%s, expires in %d s) sends this connection to %s", c.State, c.Expires, c.Dest)
			}
		}
	}
	if v.Persistent {
		// A persistence template is an entry with client port 0: every connection from that client address goes
		// to the same real server while it lives.
		if c, ok := r.State.Connection(v.Protocol, netip.AddrPortFrom(client.Addr(), 0), vip); ok {
			if rs := v.realServer(c.Dest); rs != nil {
				return rs, fmt.Sprintf("persistent service: the template for %s (expires in %d s) sends every new connection from it to %s", client.Addr(), c.Expires, c.Dest)
			}
		}
	}
	return nil, ""
}

func (v *VirtualServer) realServer(a netip.AddrPort) *RealServer {
	for i := range v.RealServers {
		if v.RealServers[i].Addr() == a {
			return &v.RealServers[i]
		}
	}
	return nil
}

// forward records the chosen real server and does what its forwarding method does. turn is its place in the
// scheduler's order (0: not known; -1: an existing entry or template chose it, not the scheduler).
func (r *Ruleset) forward(w *netfilter.Walk, v *VirtualServer, rs *RealServer, prob float64, why string, turn int) netfilter.Verdict {
	h := trace.Hop{Table: Table, Chain: v.Name(), Text: rs.Line(), Matched: true, Reason: why}
	stampChoice(&h, v, rs, why, turn)
	if prob < 1 {
		h.Probability = prob
	}
	if what := rs.Unresolved(); what != "" {
		// The listing printed the real server by name: where IPVS sends the packet is not known.
		w.Add(h)
		w.Missing("the %s of real server %s of %s: %s", what, rs.As, v.Name(), rs.why())
		return netfilter.Unknown
	}
	vip := v.Addr()
	client := netip.AddrPortFrom(w.Pkt.Src, w.Pkt.Sport)
	switch rs.Forward {
	case "Masq":
		h.Verdict = "dnat to " + rs.Addr().String()
		h.Changes = []string{w.DNAT(rs.Addr())}
		h.DoesAt(trace.StageDNAT, "IPVS real server "+rs.Addr().String()+" "+rs.Forward, h.Verdict, "")
		entry := fmt.Sprintf("%s -> %s -> %s", clientString(client), vip, rs.Addr())
		w.ReverseNATBy("IPVS's connection entry", fmt.Sprintf("IPVS's connection entry %s (Masq: ip_vs_reply4 undoes its DNAT)", entry))
		if r.MasqueradeUnknown {
			w.SourceUnknown(MasqueradeUnknownNote)
		}
	case "Local":
		h.Verdict = "accept"
		w.Add(h)
		w.Note("the real server %s is this node (Local forwarding): IPVS hands the packet to the node's own socket", rs.Addr())
		return netfilter.Accept
	default:
		h.Verdict = "forward to " + rs.Addr().String()
		w.Note("real server %s is reached by %s forwarding: the packet is sent to it unchanged", rs.Addr(), rs.Forward)
	}
	w.Add(h)
	return netfilter.Stolen
}

// MasqueradeUnknownNote is the walk's note for a packet IPVS translated when the input lacks the nat rules that
// may masquerade it (Ruleset.MasqueradeUnknown): the path's SNAT and the reply's destination are then unknown.
const MasqueradeUnknownNote = "the source the endpoint sees is not known from this dump: kube-proxy's IPVS mode masquerades NodePort and --masquerade-all traffic with its iptables rules (KUBE-POSTROUTING), which the dump does not have; paste iptables-save too"

func clientString(a netip.AddrPort) string {
	if a.Port() == 0 {
		return a.Addr().String() + ":PORT"
	}
	return a.String()
}

// choices are the real servers a new connection can go to (indexes into v.RealServers), each one's share of
// new connections, what to say of it and, for rr, its turn. rr (kube-proxy's default) takes every server with
// a weight above 0 in turn, in list order; the state tells whose turn is next when its connection counters
// show an unbroken rotation (turns is nil otherwise). The other schedulers are described by their long-run
// shares.
func choices(v *VirtualServer) (avail []int, probs []float64, why []string, turns []int) {
	total := 0
	for i, rs := range v.RealServers {
		if rs.Weight > 0 {
			avail = append(avail, i)
			total += rs.Weight
		}
	}
	if len(avail) == 0 {
		return nil, nil, nil, nil
	}
	if v.Scheduler == "rr" {
		turns = rrTurns(v, avail)
	}
	for k, i := range avail {
		rs := v.RealServers[i]
		switch v.Scheduler {
		case "rr":
			probs = append(probs, 1/float64(len(avail)))
			s := fmt.Sprintf("round robin: every %s new connection, in list order", ordinal(len(avail)))
			if turns != nil {
				s += fmt.Sprintf("; turn %d (%s)", turns[k], turnText(turns[k]))
			}
			why = append(why, s)
		case "wrr":
			probs = append(probs, float64(rs.Weight)/float64(total))
			why = append(why, fmt.Sprintf("weighted round robin: %d of every %d new connections (weight %d)", rs.Weight, total, rs.Weight))
		default:
			probs = append(probs, float64(rs.Weight)/float64(total))
			why = append(why, fmt.Sprintf("scheduler %s: %s; share by weight %d of %d", v.Scheduler, schedulerText(v.Scheduler), rs.Weight, total))
		}
	}
	return avail, probs, why, turns
}

// rrTurns reads round robin's position from the connection counters. The kernel's rr (ip_vs_rr.c) starts at
// the head of the list and takes the next server with a weight above 0 each time, so while the list has not
// changed, the counters read k+1, …, k+1, k, …, k in list order and the first k is next. Anything else (a
// server added or removed since, weights changed, counters of removed servers in the service's total) means
// the position cannot be told. The counters are the kernel's estimator's, refreshed every 2 seconds.
func rrTurns(v *VirtualServer, avail []int) []int {
	if v.FromListing || len(avail) != len(v.RealServers) {
		return nil
	}
	var sum uint64
	first := v.RealServers[avail[0]].Connections
	next := -1
	for k, i := range avail {
		c := v.RealServers[i].Connections
		sum += uint64(c)
		switch {
		case c == first && next < 0: // still among the k+1s
		case c+1 == first:
			if next < 0 {
				next = k
			}
		default:
			return nil
		}
	}
	if sum != uint64(v.Connections) {
		return nil
	}
	if next < 0 {
		next = 0
	}
	turns := make([]int, len(avail))
	for k := range avail {
		turns[k] = (k-next+len(avail))%len(avail) + 1
	}
	return turns
}

func turnText(turn int) string {
	switch turn {
	case 1:
		return "the next new connection goes here"
	case 2:
		return "the one after that"
	}
	return fmt.Sprintf("%s from now", ordinal(turn))
}

func ordinal(n int) string {
	switch n {
	case 1:
		return "1st"
	case 2:
		return "2nd"
	case 3:
		return "3rd"
	}
	return fmt.Sprintf("%dth", n)
}

func schedulerText(s string) string {
	switch s {
	case "lc", "wlc":
		return "the server with the fewest connections (by weight) at that moment"
	case "sh":
		return "a hash of the source address: each client always reaches the same server"
	case "dh":
		return "a hash of the destination address"
	case "mh":
		return "Maglev hashing of the source: each client keeps its server"
	case "sed", "nq":
		return "the shortest expected delay"
	}
	return "a choice the trace does not model"
}
