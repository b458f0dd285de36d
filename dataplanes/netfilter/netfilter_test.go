package netfilter

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/netstate"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// natOnly is a ruleset whose nat PREROUTING chain DNATs everything to 10.244.1.9:80, to see when nat runs.
type natOnly struct{}

func (natOnly) BaseChains() []BaseChain {
	return []BaseChain{{Hook: Prerouting, Priority: PriorityDstNAT, Table: "nat", Name: "PREROUTING", NAT: true,
		Run: func(w *Walk) Verdict {
			h := trace.Hop{Table: "nat", Chain: "PREROUTING", Rule: 1, Text: "dnat", Matched: true}
			h.Changes = append(h.Changes, w.DNAT(netip.MustParseAddrPort("10.244.1.9:80")))
			w.Add(h)
			return Accept
		}}}
}

func node() *netstate.State {
	n := netstate.FromLocalAddresses([]netip.Addr{netip.MustParseAddr("172.18.0.3")})
	n.Routes = append(n.Routes, netstate.Route{Dst: netip.MustParsePrefix("10.244.1.0/24"), Dev: "cni0", PrefSrc: netip.MustParseAddr("10.244.1.1")})
	return &n
}

// A flow with a live conntrack entry is decided by it: nat chains are skipped and the entry's translation
// applies (semantics.md, "Connection tracking").
func TestEstablishedFlowFollowsConntrack(t *testing.T) {
	n := node()
	// Captured from a netns lab with `conntrack -L` (an entry of a NodePort flow, DNAT to another pod).
	n.Conntrack = []string{"tcp      6 431999 ESTABLISHED src=172.18.0.1 dst=172.18.0.3 sport=40001 dport=31103 src=10.244.1.3 dst=10.244.1.1 sport=80 dport=63333 [ASSURED] mark=0 use=1"}
	flow := trace.Flow{Src: netip.MustParseAddr("172.18.0.1"), Dst: netip.MustParseAddr("172.18.0.3"), Sport: 40001, Dport: 31103, Proto: "tcp"}
	paths, notes, ct := Run([]Ruleset{natOnly{}}, n, flow, Origin{Iif: "eth0"}, nil)
	if ct == nil || ct.Direction != "original" {
		t.Fatalf("want the conntrack entry to decide, got %+v", ct)
	}
	if len(paths) != 1 || len(paths[0].Hops) != 0 {
		t.Fatalf("nat chains must be skipped for an established flow: %+v", paths)
	}
	p := paths[0]
	if p.Endpoint == nil || p.Endpoint.Addr() != "10.244.1.3:80" || p.SNAT != "10.244.1.1" {
		t.Errorf("want 10.244.1.3:80 seen from 10.244.1.1 (from the entry), got %+v snat %s", p.Endpoint, p.SNAT)
	}
	if !strings.Contains(strings.Join(notes, " "), "conntrack") {
		t.Errorf("notes should say conntrack decides: %v", notes)
	}
	// Another source port is a new flow: nat runs.
	flow.Sport = 40002
	paths, _, ct = Run([]Ruleset{natOnly{}}, n, flow, Origin{Iif: "eth0"}, nil)
	if ct != nil || paths[0].Endpoint == nil || paths[0].Endpoint.Addr() != "10.244.1.9:80" {
		t.Errorf("a new flow must take the nat rules: ct %+v, %+v", ct, paths[0].Endpoint)
	}
	// A TIME_WAIT entry does not decide: a new SYN replaces it.
	n.Conntrack = []string{strings.Replace(n.Conntrack[0], "ESTABLISHED", "TIME_WAIT", 1)}
	flow.Sport = 40001
	if _, _, ct = Run([]Ruleset{natOnly{}}, n, flow, Origin{Iif: "eth0"}, nil); ct != nil {
		t.Errorf("a TIME_WAIT entry must not decide a new SYN")
	}
}

// Random choices fork the walk; the paths' probabilities add up to 1.
func TestChoicesForkPaths(t *testing.T) {
	rs := chooser{}
	flow := trace.Flow{Src: netip.MustParseAddr("172.18.0.1"), Dst: netip.MustParseAddr("172.18.0.3"), Dport: 1, Proto: "tcp"}
	paths, _, _ := Run([]Ruleset{rs}, node(), flow, Origin{Iif: "eth0"}, nil)
	if len(paths) != 6 {
		t.Fatalf("a 2-way then a 3-way choice give 6 paths, got %d", len(paths))
	}
	sum := 0.0
	for _, p := range paths {
		sum += p.Probability
	}
	if sum < 1-1e-12 || sum > 1+1e-12 {
		t.Errorf("probabilities add up to %v", sum)
	}
}

type chooser struct{}

func (chooser) BaseChains() []BaseChain {
	return []BaseChain{{Hook: Prerouting, Priority: 0, Table: "t", Name: "c", Run: func(w *Walk) Verdict {
		w.Choose([]float64{0.25, 0.75})
		w.Choose([]float64{1.0 / 3, 1.0 / 3, 1.0 / 3})
		return Accept
	}}}
}

// dnatTo is a ruleset that DNATs everything in nat PREROUTING to one endpoint.
type dnatTo netip.AddrPort

func (d dnatTo) BaseChains() []BaseChain {
	return []BaseChain{{Hook: Prerouting, Priority: PriorityDstNAT, Table: "nat", Name: "PREROUTING", NAT: true,
		Run: func(w *Walk) Verdict {
			h := trace.Hop{Table: "nat", Chain: "PREROUTING", Rule: 1, Text: "dnat", Matched: true}
			h.Changes = append(h.Changes, w.DNAT(netip.AddrPort(d)))
			w.Add(h)
			return Accept
		}}}
}

// A client on the node network whose packet, source kept, goes to a pod on another node of that network gets
// its reply from that node directly, untranslated (IPVS mode's externalTrafficPolicy Local on a node without
// local endpoints); to a pod on this node, or to a source on another network, the reply comes back.
func TestReplyBypassesTheNode(t *testing.T) {
	// The lab's control plane (ip route in the node): the node network on eth0, the workers' pod CIDRs via
	// their nodes, its own pods on cni0.
	n := netstate.FromLocalAddresses([]netip.Addr{netip.MustParseAddr("172.18.0.2")})
	n.Routes = append(n.Routes,
		netstate.Route{Dst: netip.MustParsePrefix("172.18.0.0/16"), Dev: "eth0", PrefSrc: netip.MustParseAddr("172.18.0.2")},
		netstate.Route{Dst: netip.MustParsePrefix("10.244.0.0/24"), Dev: "cni0", PrefSrc: netip.MustParseAddr("10.244.0.1")},
		netstate.Route{Dst: netip.MustParsePrefix("10.244.2.0/24"), Dev: "eth0", Gateway: netip.MustParseAddr("172.18.0.4")})
	n.Routes[1].Gateway = netip.MustParseAddr("172.18.0.1") // default via the client
	for _, c := range []struct {
		src, endpoint string
		bypasses      bool
	}{
		{"172.18.0.1", "10.244.2.2:80", true},  // client on eth0's network, pod behind 172.18.0.4 on eth0
		{"172.18.0.1", "10.244.0.5:80", false}, // the pod is on this node
		{"10.1.2.3", "10.244.2.2:80", true},    // beyond the default gateway on eth0, which the pod's node uses too
	} {
		flow := trace.Flow{Src: netip.MustParseAddr(c.src), Dst: netip.MustParseAddr("172.18.0.2"), Sport: 40000, Dport: 31000, Proto: "tcp"}
		paths, _, _ := Run([]Ruleset{dnatTo(netip.MustParseAddrPort(c.endpoint))}, &n, flow, Origin{Iif: "eth0"}, nil)
		if len(paths) != 1 || paths[0].Reply == nil {
			t.Fatalf("%s -> %s: %+v", c.src, c.endpoint, paths)
		}
		if r := paths[0].Reply; r.Bypasses != c.bypasses {
			t.Errorf("%s -> %s: bypasses %v, want %v (%s)", c.src, c.endpoint, r.Bypasses, c.bypasses, r.Text)
		}
	}
	// A pod of this node (in on cni0) to a pod on another node: the reply comes back to this node's pod CIDR.
	flow := trace.Flow{Src: netip.MustParseAddr("10.244.0.5"), Dst: netip.MustParseAddr("172.18.0.2"), Sport: 40000, Dport: 31000, Proto: "tcp"}
	paths, _, _ := Run([]Ruleset{dnatTo(netip.MustParseAddrPort("10.244.2.2:80"))}, &n, flow, Origin{Iif: "cni0"}, nil)
	if len(paths) != 1 || paths[0].Reply == nil || paths[0].Reply.Bypasses {
		t.Errorf("from a pod of this node: %+v", paths)
	}
}
