// Package trace is the engine-independent model of a packet's path through a node's dataplane: what every
// engine's walker produces, what the renderers print and what verification compares with the kernel.
//
// The JSON form of Trace is a stable, documented schema (see SchemaVersion and docs/tracing.md's "trace -o json"
// section): fields are only ever added within a version.
package trace

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// SchemaVersion names the JSON schema of Trace.
const SchemaVersion = "k8sguide.trace/v1"

// Verdicts: what finally happens to the packet on this node.
// Choices a probabilistic hop can make other than at random (Hop.Choice).
const ChoiceMaglev = "maglev"

const (
	Delivered = "delivered" // sent on towards an endpoint (a pod here or on another node)
	Dropped   = "dropped"
	Rejected  = "rejected"
	Local     = "local" // handed to a socket on the node itself (nothing translated it to an endpoint)
	// Unknown: the input lacks what the answer needs (a chain it jumps to, the table where Services are
	// translated, the rest of a cut dump); Path.Missing names what. Never a guess in its place.
	Unknown = "unknown"
)

// Packet is the first packet of a flow as it reaches the node (or leaves it, when the node makes it).
type Packet struct {
	Src   string `json:"src"`   // IP or IP:PORT
	Dst   string `json:"dst"`   // IP:PORT
	Proto string `json:"proto"` // tcp | udp
	// From says where the packet comes from: "client" (outside the cluster, arrives on the node's interface),
	// "node" (made by the node itself) or "pod/NAME" (a pod; arrives from the pod network).
	From string `json:"from"`
	// InIface is the interface it arrives on ("" when the node makes it).
	InIface string `json:"inIface,omitempty"`
}

// Flow is a packet's addresses, parsed.
type Flow struct {
	Src, Dst     netip.Addr
	Sport, Dport uint16 // Sport 0: any source port
	Proto        string
	// Quiet walks keep only the rules that matched, without an account of the others: for a check of where
	// packets go rather than why (deploy's wait walks thousands of Services through chains of thousands of
	// rules), the walk need not evaluate a rule whose destination cannot be the packet's.
	Quiet bool
}

// ParseFlow parses a Packet's addresses.
func (p Packet) ParseFlow() (Flow, error) {
	f := Flow{Proto: p.Proto}
	dst, err := ParseDst(p.Dst)
	if err != nil {
		return f, fmt.Errorf("destination %v", err)
	}
	f.Dst, f.Dport = dst.Addr(), dst.Port()
	if f.Src, f.Sport, err = ParseSrc(p.Src); err != nil {
		return f, fmt.Errorf("source %v", err)
	}
	return f, nil
}

// ParseDst reads a destination as --dst and a trace's packet give it: IPv4:PORT (the walk follows IPv4 rules).
func ParseDst(s string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return ap, fmt.Errorf("%q: want IP:PORT, e.g. 172.18.0.3:30080", s)
	}
	if !ap.Addr().Is4() {
		return ap, fmt.Errorf("%q: want IPv4:PORT, e.g. 172.18.0.3:30080", s)
	}
	// No TCP, UDP or SCTP packet goes to port 0, and no rule of a proxy matches it: a walk of one only meets
	// rules that ignore the port (a Service's ClusterIP match) and would name a Service that has no port 0.
	if ap.Port() == 0 {
		return ap, fmt.Errorf("%q: port 0 is no destination port; want IPv4:PORT with PORT 1-65535", s)
	}
	return ap, nil
}

// ParseSrc reads a source as --src and a trace's packet give it: IPv4 or IPv4:PORT (port 0: any).
func ParseSrc(s string) (netip.Addr, uint16, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil && ap.Addr().Is4() {
		return ap.Addr(), ap.Port(), nil
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Is4() {
		return a, 0, nil
	}
	return netip.Addr{}, 0, fmt.Errorf("%q: want IPv4 or IPv4:PORT", s)
}

// Hop is one rule (or map lookup) the packet was evaluated against.
type Hop struct {
	Hook  string `json:"hook"`  // PREROUTING, INPUT, FORWARD, OUTPUT, POSTROUTING
	Table string `json:"table"` // iptables: raw/mangle/nat/filter; nftables: "ip kube-proxy"; ebpf: map
	Chain string `json:"chain"`
	// Function is, for a program's step (ebpf), the datapath's function doing it, as named in its source
	// ("lb4_lookup_service"; "a → b" when a calls b for it).
	Function string `json:"function,omitempty"`
	// Rule is the rule's 1-based position in its chain (iptables -L --line-numbers); 0 for a chain's
	// policy or for a hop that is not a rule.
	Rule    int    `json:"rule"`
	Text    string `json:"text"`
	Matched bool   `json:"matched"`
	// Reason says why a rule did not match (the first condition that failed), or what a random choice was.
	Reason string `json:"reason,omitempty"`
	// Verdict is what a matched rule did: "jump KUBE-SVC-…", "goto …", "return", "continue", "accept",
	// "drop", "reject", "dnat to 10.244.1.2:80", "masquerade to 172.18.0.3", "policy accept", ….
	Verdict string `json:"verdict,omitempty"`
	// Changes lists what the rule changed in the packet or its conntrack entry ("mark 0x0 -> 0x4000").
	Changes []string `json:"changes,omitempty"`
	// Probability is, for a random-choice rule, the chance it matches when evaluated (statistic's stored
	// value, numgen's 1/N); 0 otherwise.
	Probability float64 `json:"probability,omitempty"`
	// Choice says how a hop with a Probability chooses: "" for at random (iptables statistic, nftables numgen,
	// Cilium's random selection), "maglev" for a share of Cilium's Maglev table (the flow's hash decides).
	Choice string `json:"choice,omitempty"`
	// Service is the Kubernetes Service the rule belongs to, from its comment or chain name, when known.
	Service string `json:"service,omitempty"`
	// Parts are the stages of a Service's translation the hop does, stamped by its engine (see Part).
	Parts []Part `json:"parts,omitempty"`
}

// Endpoint is one destination the packet can be translated to.
type Endpoint struct {
	IP   string `json:"ip"`
	Port int    `json:"port"`
	// Probability is the overall chance this endpoint is chosen for a new flow.
	Probability float64 `json:"probability"`
	Pod         string  `json:"pod,omitempty"`  // namespace/name where known
	Node        string  `json:"node,omitempty"` // the node the pod runs on, where known
	// Turn is a round-robin scheduler's order when the node's state tells it (IPVS rr): 1 for the endpoint the
	// next new connection goes to, 2 for the one after, and so on; 0 when there is no such order or it is
	// not known.
	Turn int `json:"turn,omitempty"`
}

// Addr is the endpoint as IP:PORT.
func (e Endpoint) Addr() string {
	return netip.AddrPortFrom(netip.MustParseAddr(e.IP), uint16(e.Port)).String()
}

// Path is one complete outcome of the walk: the rules visited in order and what came of it. A walk has
// several paths when a rule chooses at random (iptables statistic, nftables numgen).
type Path struct {
	Probability float64 `json:"probability"`
	Hops        []Hop   `json:"hops"`
	Verdict     string  `json:"verdict"`
	// VerdictBy is the rule that dropped or rejected the packet.
	VerdictBy *Hop      `json:"verdictBy,omitempty"`
	Endpoint  *Endpoint `json:"endpoint,omitempty"`
	// SNAT is the source address (and port, when fixed) the endpoint sees; Unknown ("unknown") when the input
	// lacks the rules that may masquerade the packet (the notes say which), never the client's address in its
	// place.
	SNAT string `json:"snat,omitempty"`
	// Egress is where the packet leaves the node: interface and next hop.
	Egress string `json:"egress,omitempty"`
	Reply  *Reply `json:"reply,omitempty"`
	// NextNode is the node of the cluster the packet leaves for, untranslated, when it is addressed to that
	// node (a NodePort of another node, say): that node's rules take it on and decide its endpoint and the
	// source it sees, so the path claims neither (SNAT and Reply stay empty; Egress says how it leaves).
	NextNode string `json:"nextNode,omitempty"`
	// Affinity names what sent the packet to its endpoint by session affinity (the Ref of the hop that matched
	// the client's entry), "" when the endpoint was chosen afresh.
	Affinity string `json:"affinity,omitempty"`
	// LocalOnly names what restricted the choice to this node's endpoints (externalTrafficPolicy Local: kube-
	// proxy's local-endpoints chain, Cilium's external scope of a Local frontend), "" when every endpoint could be
	// chosen.
	LocalOnly string `json:"localOnly,omitempty"`
	// NoAnswer, for a path that leaves the node untranslated, says why nothing answers it (its destination is
	// a ClusterIP on a port the Service does not have: no host owns a ClusterIP); "" when something may.
	NoAnswer string `json:"noAnswer,omitempty"`
	// Missing names what the input lacks for this path's answer (its verdict is then Unknown).
	Missing []string `json:"missing,omitempty"`
}

// Reply is the way back: the endpoint's answer and how conntrack undoes the translations.
type Reply struct {
	// From and To are the reply's addresses as the endpoint sends it; To is Unknown when the path's SNAT is.
	From string `json:"from"`
	To   string `json:"to"`
	// AsSeen are the reply's addresses after conntrack's reverse NAT, as the original sender receives it.
	AsSeenFrom string `json:"asSeenFrom"`
	AsSeenTo   string `json:"asSeenTo"`
	Text       string `json:"text"`
	// UndoneBy names, in order, what turns the reply back ("conntrack", "IPVS's connection entry",
	// "cilium_lb4_reverse_nat[3]"); empty when nothing needs to.
	UndoneBy []string `json:"undoneBy,omitempty"`
	// Bypasses is set when the reply cannot come back through this node: the endpoint's node has the
	// (untranslated) client on its own network and answers it directly, from the pod's address, which
	// nothing translates back. The client drops that answer, and the connection fails.
	Bypasses bool `json:"bypasses,omitempty"`
}

// EveryDelivered is what field gives of every delivered path, when it gives each the same non-empty answer
// ("" otherwise, or when no path is delivered): what held every path to its endpoint (session affinity, a
// traffic policy of Local).
func (t *Trace) EveryDelivered(field func(Path) string) string {
	by := ""
	for _, p := range t.Paths {
		if p.Verdict != Delivered {
			continue
		}
		v := field(p)
		if v == "" || by != "" && v != by {
			return ""
		}
		by = v
	}
	return by
}

// Ref names the hop's rule: "TABLE/CHAIN rule N", or for an eBPF program's step "MAP (FUNCTION)" (FUNCTION
// alone where it read no map).
func (h Hop) Ref() string {
	switch {
	case h.Function != "" && h.Table == "":
		return h.Function
	case h.Function != "":
		return h.Table + " (" + h.Function + ")"
	}
	return fmt.Sprintf("%s/%s rule %d", h.Table, h.Chain, h.Rule)
}

// Conntrack is an existing conntrack entry that decides an established flow.
type Conntrack struct {
	Entry string `json:"entry"` // as `conntrack -L` prints it
	// Direction is "original" when the packet matches the entry's original tuple, "reply" otherwise.
	Direction string `json:"direction"`
}

// Trace is the whole answer for one packet.
type Trace struct {
	Version   string `json:"version"`
	Dataplane string `json:"dataplane"` // iptables | nftables | ipvs | ebpf
	Node      string `json:"node,omitempty"`
	Packet    Packet `json:"packet"`
	// Service is the Kubernetes Service the packet was sent to (namespace/name:port), when a rule names it.
	Service string `json:"service,omitempty"`
	// Hops are the rules every path visits before the first random choice (all of them when there is none).
	Hops []Hop `json:"hops"`
	// Paths are the complete outcomes, most likely first; their probabilities add up to 1.
	Paths []Path `json:"paths"`
	// Endpoints are the endpoints the packet can reach, with their overall probabilities.
	Endpoints []Endpoint `json:"endpoints"`
	// Verdict is the verdict of every path when they all agree, else "unknown" if any path's outcome is not
	// known, else "delivered" if any path delivers.
	Verdict string `json:"verdict"`
	// SNAT is the source address the endpoint sees, when all delivering paths agree ("" otherwise; see paths).
	SNAT string `json:"snat,omitempty"`
	// Conntrack is set when an existing entry decides the flow: nat rules are then not consulted.
	Conntrack *Conntrack `json:"conntrack,omitempty"`
	Notes     []string   `json:"notes,omitempty"`
	// Missing is what the input lacks for the answer, over all paths (see Path.Missing).
	Missing []string `json:"missing,omitempty"`
	// Unexplored is the chance of the outcomes the walk did not reach: it stops at its bounds (4,096 paths, so
	// many rule evaluations), and a ruleset that forks without end has more. Paths' probabilities then add up
	// to 1 - Unexplored, the verdict is unknown for that share, and each endpoint's Probability is the least it
	// gets (Chance says so): never 0 % for an endpoint the unwalked outcomes may all reach.
	Unexplored float64 `json:"unexplored,omitempty"`
}

// Percent is a chance as the views print it: two decimals, or, where those would read 0.00% or 100.00% for a
// chance that is neither (one path of 2³⁰, the rest), as many more as show two digits of the difference: a
// chance that is not zero never reads as zero, nor one short of certain as certain.
func Percent(p float64) string {
	v := p * 100
	for digits := 2; ; digits++ {
		s := strconv.FormatFloat(v, 'f', digits, 64)
		whole := strings.TrimRight(strings.TrimRight(s, "0"), ".")
		if (whole != "0" || v <= 0) && (whole != "100" || v >= 100) {
			if digits > 2 {
				s = strconv.FormatFloat(v, 'f', digits+1, 64) // two significant digits of the difference
			}
			return s + "%"
		}
		if digits == 12 {
			if v < 50 {
				return "<0.000000000001%"
			}
			return ">99.999999999999%"
		}
	}
}

// Chance is an endpoint's (or a path's) chance p as the views print it: "≥ p" when part of the outcomes were not
// walked (Unexplored), which may reach it too.
func (t *Trace) Chance(p float64) string {
	if t.Unexplored > 0 {
		return "≥" + Percent(p)
	}
	return Percent(p)
}

// Finish fills in the fields derived from Paths: order, common hops, endpoints, verdict, SNAT, service.
func (t *Trace) Finish() {
	t.Version = SchemaVersion
	sortPaths(t.Paths)
	t.Hops = commonPrefix(t.Paths)
	t.Endpoints = nil
	index := map[string]int{}
	verdicts := map[string]bool{}
	snats := map[string]bool{}
	t.Missing = nil
	for _, p := range t.Paths {
		verdicts[p.Verdict] = true
		for _, m := range p.Missing {
			if !slices.Contains(t.Missing, m) {
				t.Missing = append(t.Missing, m)
			}
		}
		if p.Verdict == Delivered {
			snats[p.SNAT] = true
		}
		if p.Endpoint == nil {
			continue
		}
		key := p.Endpoint.Addr()
		if i, ok := index[key]; ok {
			t.Endpoints[i].Probability += p.Probability
			continue
		}
		index[key] = len(t.Endpoints)
		e := *p.Endpoint
		e.Probability = p.Probability
		t.Endpoints = append(t.Endpoints, e)
	}
	// Each path's endpoint carries the endpoint's overall chance, as Endpoints does (several paths may reach it).
	for i, p := range t.Paths {
		if p.Endpoint != nil {
			e := *p.Endpoint
			e.Probability = t.Endpoints[index[e.Addr()]].Probability
			t.Paths[i].Endpoint = &e
		}
	}
	if t.Unexplored > 0 {
		// What the walk did not reach is not known: the trace stands behind no single verdict, and says why.
		verdicts[Unknown] = true
		t.Missing = append(t.Missing, fmt.Sprintf("the outcomes of %s of new flows: k8sguide stopped walking the random choices at its bounds (see the notes), so each endpoint's chance is the least it gets", Percent(t.Unexplored)))
	}
	switch {
	case len(verdicts) == 1:
		for v := range verdicts {
			t.Verdict = v
		}
	case verdicts[Unknown]:
		// Some outcome cannot be told: the trace stands behind no single verdict.
		t.Verdict = Unknown
	case verdicts[Delivered]:
		t.Verdict = Delivered
	default:
		t.Verdict = t.Paths[0].Verdict // the most likely outcome; every path carries its own
	}
	t.SNAT = ""
	if len(snats) == 1 {
		for s := range snats {
			t.SNAT = s
		}
	}
	if t.Service == "" {
		for _, p := range t.Paths {
			for _, h := range p.Hops {
				if h.Matched && h.Service != "" {
					t.Service = h.Service
					break
				}
			}
			if t.Service != "" {
				break
			}
		}
	}
}

func sortPaths(paths []Path) {
	// Stable insertion sort by falling probability: paths come in rule order, which reads best among equals.
	for i := 1; i < len(paths); i++ {
		for j := i; j > 0 && paths[j].Probability > paths[j-1].Probability+1e-12; j-- {
			paths[j], paths[j-1] = paths[j-1], paths[j]
		}
	}
}

func commonPrefix(paths []Path) []Hop {
	if len(paths) == 0 {
		return nil
	}
	n := len(paths[0].Hops)
	for _, p := range paths[1:] {
		m := 0
		for m < n && m < len(p.Hops) && sameHop(p.Hops[m], paths[0].Hops[m]) {
			m++
		}
		n = m
	}
	return append([]Hop(nil), paths[0].Hops[:n]...)
}

func sameHop(a, b Hop) bool {
	return a.Hook == b.Hook && a.Table == b.Table && a.Chain == b.Chain && a.Rule == b.Rule &&
		a.Matched == b.Matched && a.Verdict == b.Verdict
}

// ServiceFromComment extracts "namespace/name:port" from a kube-proxy rule comment such as
// `default/web:http cluster IP`, `default/web -> 10.244.1.2:80` or `masquerade traffic for default/web
// external destinations`; "" when the comment names no Service.
func ServiceFromComment(c string) string {
	for _, f := range strings.Fields(c) {
		ns, rest, ok := strings.Cut(f, "/")
		if !ok || ns == "" || rest == "" || strings.ContainsAny(ns, ".:") {
			continue
		}
		if strings.Count(f, "/") != 1 {
			continue
		}
		return strings.TrimSuffix(f, ":")
	}
	return ""
}
