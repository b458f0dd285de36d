package ebpf

import (
	"encoding/binary"
	"math"
	"math/bits"
	"net/netip"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

func walk(t *testing.T, s *State, src string, dst string, proto string) *trace.Trace {
	t.Helper()
	p := trace.Packet{Src: src, Dst: dst, Proto: proto, From: "client", InIface: "eth0"}
	f, err := p.ParseFlow()
	if err != nil {
		t.Fatal(err)
	}
	// A State goes through the snapshot's JSON: the walk must give the same answer after it.
	paths, notes, ct := Walk(viaJSON(t, s), f, podNames)
	tr := &trace.Trace{Dataplane: "ebpf", Packet: p, Paths: paths, Notes: notes, Conntrack: ct}
	tr.Finish()
	return tr
}

func endpoints(tr *trace.Trace) map[string]float64 {
	out := map[string]float64{}
	for _, e := range tr.Endpoints {
		out[e.Addr()] = e.Probability
	}
	return out
}

func lastHop(p trace.Path) trace.Hop { return p.Hops[len(p.Hops)-1] }

func TestWalkRandomOnePathPerSlot(t *testing.T) {
	s, _ := threeBackends(t)
	tr := walk(t, s, "172.18.0.100:40000", "172.18.0.2:30510", "tcp")
	if len(tr.Paths) != 3 || tr.Verdict != trace.Delivered {
		t.Fatalf("want 3 delivered paths, got %d (%s): %+v", len(tr.Paths), tr.Verdict, tr.Paths)
	}
	want := map[string]float64{"10.244.1.5:80": 1.0 / 3, "10.244.2.6:80": 1.0 / 3, "10.244.3.7:8080": 1.0 / 3}
	got := endpoints(tr)
	for ep, p := range want {
		if got[ep] != p {
			t.Errorf("%s: probability %v, want exactly 1/3", ep, got[ep])
		}
	}
	for _, p := range tr.Paths {
		if p.SNAT != "172.18.0.2" {
			t.Errorf("remote backend %s: SNAT %q, want the node's 172.18.0.2", p.Endpoint.Addr(), p.SNAT)
		}
		if p.Reply == nil || p.Reply.AsSeenFrom != "172.18.0.2:30510" || p.Reply.AsSeenTo != "172.18.0.100:40000" {
			t.Errorf("reply %+v: want it seen from the frontend by the client", p.Reply)
		}
		if !strings.Contains(p.Reply.To, "172.18.0.2:") {
			t.Errorf("reply goes to %s, want the SNAT address", p.Reply.To)
		}
		if p.Endpoint.Pod == "" || p.Endpoint.Node == "" {
			t.Errorf("endpoint %+v: names not resolved", p.Endpoint)
		}
	}
	// The common hops: frontend lookup (matched, slot 0) and the conntrack miss.
	if len(tr.Hops) < 2 || tr.Hops[0].Table != MapServices || !tr.Hops[0].Matched || tr.Hops[1].Table != MapCT || tr.Hops[1].Matched {
		t.Fatalf("common hops: %+v", tr.Hops)
	}
	if h := tr.Hops[0]; h.Hook != "tcx ingress eth0" || h.Chain != "cil_from_netdev" ||
		!strings.Contains(h.Text, "ac120002772e000006000000") || !strings.Contains(h.Verdict, "count 3, rev-NAT 7, [NodePort]") {
		t.Errorf("frontend hop: %+v", h)
	}
	// Each path's slot hop is the random choice.
	for _, p := range tr.Paths {
		slot := p.Hops[2]
		if slot.Probability != 1.0/3 || !strings.Contains(slot.Reason, "get_prandom_u32() % 3 + 1") {
			t.Errorf("slot hop %+v", slot)
		}
		var dnat string
		for _, h := range p.Hops {
			if h.Table == MapBackends {
				dnat = h.Verdict
			}
		}
		if dnat != "dnat to "+p.Endpoint.Addr() {
			t.Errorf("backend hop verdict %q, endpoint %s", dnat, p.Endpoint.Addr())
		}
	}
}

// expectedMaglevIndex computes the C's index independently of MaglevHash: on little-endian the network-order
// address and ports are byte-swapped when loaded as integers.
func expectedMaglevIndex(src netip.Addr, sport, dport uint16, proto uint8, seed uint32, size int) int {
	a := src.As4()
	saddr := binary.LittleEndian.Uint32(a[:])
	ports := uint32(bits.ReverseBytes16(dport))<<16 | uint32(bits.ReverseBytes16(sport))
	return int(Jhash3Words(saddr, ports, uint32(proto), seed) % uint32(size))
}

func maglevState(t *testing.T) (*State, []uint32) {
	s, _ := threeBackends(t)
	s.Configs[0].LBDefaultAlg = AlgMaglev
	// A 13-entry table (a prime, as Maglev's are) with uneven shares: backend 1 ×5, 2 ×4, 3 ×4.
	lut := []uint32{1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1}
	addMaglev(t, s, 7, lut)
	return s, lut
}

func TestWalkMaglevExactBackend(t *testing.T) {
	s, lut := maglevState(t)
	byID := map[uint32]string{1: "10.244.1.5:80", 2: "10.244.2.6:80", 3: "10.244.3.7:8080"}
	seen := map[uint32]bool{}
	for sport := uint16(40000); sport < 40040; sport++ {
		src := netip.AddrPortFrom(client, sport).String()
		tr := walk(t, s, src, "172.18.0.2:30510", "tcp")
		if len(tr.Paths) != 1 || tr.Paths[0].Probability != 1 {
			t.Fatalf("sport %d: want exactly one path, got %d", sport, len(tr.Paths))
		}
		idx := expectedMaglevIndex(client, sport, 30510, 6, 0x5a5aa5a5, len(lut))
		want := byID[lut[idx]]
		seen[lut[idx]] = true
		if got := tr.Paths[0].Endpoint.Addr(); got != want {
			t.Fatalf("sport %d: backend %s, want LUT[%d] = %s", sport, got, idx, want)
		}
	}
	if len(seen) != 3 {
		t.Errorf("40 source ports reached backends %v: the hash does not spread", seen)
	}
}

func TestWalkMaglevUnknownSourcePort(t *testing.T) {
	s, _ := maglevState(t)
	tr := walk(t, s, "172.18.0.100", "172.18.0.2:30510", "tcp")
	got := endpoints(tr)
	want := map[string]float64{"10.244.1.5:80": 5.0 / 13, "10.244.2.6:80": 4.0 / 13, "10.244.3.7:8080": 4.0 / 13}
	for ep, p := range want {
		if math.Abs(got[ep]-p) > 1e-15 {
			t.Errorf("%s: %v, want its table share %v", ep, got[ep], p)
		}
	}
	if !strings.Contains(strings.Join(tr.Notes, "\n"), "source port") {
		t.Errorf("no note about the unknown source port: %q", tr.Notes)
	}
}

func TestWalkMaglevAffinityHashesWithoutSourcePort(t *testing.T) {
	s, lut := maglevState(t)
	setValue(t, s, ServiceKey{Address: nodeIP, Port: 30510, Proto: 6}, func(v *ServiceValue) {
		v.Flags |= uint8(FlagSessionAffinity)
		v.BackendID = 10800 // affinity timeout
	})
	idx := expectedMaglevIndex(client, 0, 30510, 6, 0x5a5aa5a5, len(lut))
	for _, src := range []string{"172.18.0.100", "172.18.0.100:1234", "172.18.0.100:55555"} {
		tr := walk(t, s, src, "172.18.0.2:30510", "tcp")
		if len(tr.Paths) != 1 {
			t.Fatalf("%s: %d paths, want one: affinity services hash with source port 0", src, len(tr.Paths))
		}
		if got := tr.Paths[0].Endpoint.Addr(); got != map[uint32]string{1: "10.244.1.5:80", 2: "10.244.2.6:80", 3: "10.244.3.7:8080"}[lut[idx]] {
			t.Errorf("%s: backend %s, want LUT[%d]", src, got, idx)
		}
	}
}

func svcTuple(sport uint16) CTTuple {
	return CTTuple{Daddr: nodeIP, Saddr: client, Dport: sport, Sport: 30510, Nexthdr: 6, Flags: TupleService}
}

func TestWalkConntrackWins(t *testing.T) {
	s, _ := threeBackends(t)
	addCT(t, s, MapCT, svcTuple(40000), CTEntry{BackendID: 2, RevNAT: 7, Lifetime: 20_000})
	tr := walk(t, s, "172.18.0.100:40000", "172.18.0.2:30510", "tcp")
	if len(tr.Paths) != 1 || tr.Paths[0].Endpoint.Addr() != "10.244.2.6:80" || tr.Paths[0].Probability != 1 {
		t.Fatalf("want the entry's backend 2 only, got %+v", endpoints(tr))
	}
	if tr.Conntrack == nil || !strings.HasPrefix(tr.Conntrack.Entry, "TCP SVC 172.18.0.100:40000 -> 172.18.0.2:30510 expires=20000") ||
		!strings.Contains(tr.Conntrack.Entry, "BackendID=2") {
		t.Errorf("conntrack %+v", tr.Conntrack)
	}
	// The lookup key, byte for byte: daddr frontend, saddr client, dport = the client's port (0x9c40 = 40000),
	// sport = the frontend's (0x772e = 30510), TCP, TUPLE_F_SERVICE. The same orientation found the entry a
	// real bpf_host made for a curl in the netns lab ("TCP SVC 172.18.0.1:45678 -> 172.18.0.3:32386").
	if h := tr.Hops[1]; h.Table != MapCT || !h.Matched || !strings.Contains(h.Text, "key ac120002ac1200649c40772e0604") {
		t.Errorf("conntrack hop %+v", h)
	}
	// The same entry for another source port, another service, or a closing one (a SYN reopens) does not decide.
	for name, mod := range map[string]func(*State){
		"other port":    func(s *State) { s.CT[0].Key.Dport = 40001 },
		"other service": func(s *State) { s.CT[0].Value.RevNAT = 8 },
		"closing":       func(s *State) { s.CT[0].Value.Flags = CTRxClosing | CTTxClosing },
		"wrong map":     func(s *State) { s.CT[0].Map = MapCTAny },
		"egress flags":  func(s *State) { s.CT[0].Key.Flags = TupleOut },
	} {
		s2, _ := threeBackends(t)
		addCT(t, s2, MapCT, svcTuple(40000), CTEntry{BackendID: 2, RevNAT: 7})
		mod(s2)
		tr := walk(t, s2, "172.18.0.100:40000", "172.18.0.2:30510", "tcp")
		if len(tr.Paths) != 3 || tr.Conntrack != nil {
			t.Errorf("%s: %d paths, conntrack %v; want a new choice", name, len(tr.Paths), tr.Conntrack)
		}
	}
}

func TestWalkConntrackBackendGone(t *testing.T) {
	s, _ := threeBackends(t)
	addCT(t, s, MapCT, svcTuple(40000), CTEntry{BackendID: 99, RevNAT: 7})
	tr := walk(t, s, "172.18.0.100:40000", "172.18.0.2:30510", "tcp")
	if len(tr.Paths) != 3 {
		t.Fatalf("backend gone: want a new random choice (3 paths), got %d", len(tr.Paths))
	}
	// UDP keeps a terminating backend; a TCP SYN moves away from it.
	s, _ = threeBackends(t)
	s.Backends[1].Value.Flags = BackendTerminating
	udp := svcTuple(40000)
	udp.Nexthdr = 17
	addService(t, s, netip.MustParseAddrPort("172.18.0.2:30510"), 17, 10, FlagNodePort|FlagRoutable, 1, 2, 3)
	addCT(t, s, MapCTAny, udp, CTEntry{BackendID: 2, RevNAT: 10})
	tcp := svcTuple(40000)
	addCT(t, s, MapCT, tcp, CTEntry{BackendID: 2, RevNAT: 7})
	if tr := walk(t, s, "172.18.0.100:40000", "172.18.0.2:30510", "udp"); len(tr.Paths) != 1 || tr.Paths[0].Endpoint.Addr() != "10.244.2.6:80" {
		t.Errorf("udp: want the terminating backend kept, got %v", endpoints(tr))
	}
	if tr := walk(t, s, "172.18.0.100:40000", "172.18.0.2:30510", "tcp"); len(tr.Paths) != 3 {
		t.Errorf("tcp SYN: want a new choice, got %v", endpoints(tr))
	}
}

func TestWalkNoFrontend(t *testing.T) {
	s, _ := threeBackends(t)
	// An address that is no frontend at all (another node's): passed on to the stack, which routes it on
	// untranslated.
	tr := walk(t, s, "172.18.0.100:40000", "172.18.0.3:30510", "tcp")
	if tr.Verdict != trace.Delivered || len(tr.Paths) != 1 || tr.Paths[0].Endpoint != nil {
		t.Fatalf("verdict %s, %d paths", tr.Verdict, len(tr.Paths))
	}
	if h := tr.Paths[0].Hops[0]; h.Matched || !strings.Contains(h.Reason, "no frontend 172.18.0.3:30510/TCP") {
		t.Errorf("frontend hop %+v", h)
	}
	// A frontend address on a port no Service has: the wildcard entry drops it.
	tr = walk(t, s, "172.18.0.100:40000", "172.18.0.2:31000", "tcp")
	if tr.Verdict != trace.Dropped || tr.Paths[0].VerdictBy == nil || tr.Paths[0].VerdictBy.Verdict != "drop (DROP_NO_SERVICE)" {
		t.Errorf("unserved port: %s %+v", tr.Verdict, tr.Paths[0].VerdictBy)
	}
	// The right port with the wrong protocol: protocol differentiation; the reason says so.
	tr = walk(t, s, "172.18.0.100:40000", "172.18.0.2:30510", "udp")
	if tr.Verdict != trace.Dropped || !strings.Contains(tr.Paths[0].Hops[0].Reason, "exists for TCP only") {
		t.Errorf("udp to a tcp frontend: %s %q", tr.Verdict, tr.Paths[0].Hops[0].Reason)
	}
}

func TestWalkNonRoutable(t *testing.T) {
	// Only the 0.0.0.0 surrogate: from-netdev does not fall back to it.
	s := newTestState(t)
	addBackend(t, s, 1, "10.244.1.5:80", BackendActive)
	addService(t, s, netip.MustParseAddrPort("0.0.0.0:30510"), 6, 8, FlagNodePort, 1)
	tr := walk(t, s, "172.18.0.100:40000", "172.18.0.2:30510", "tcp")
	if tr.Verdict != trace.Local || !strings.Contains(tr.Paths[0].Hops[0].Reason, "0.0.0.0:30510/TCP (the non-routable surrogate") {
		t.Errorf("surrogate only: %s %q", tr.Verdict, tr.Paths[0].Hops[0].Reason)
	}
	// A ClusterIP frontend reached from outside: matched, but non-routable.
	addService(t, s, netip.MustParseAddrPort("10.96.0.10:80"), 6, 3, 0, 1)
	tr = walk(t, s, "172.18.0.100:40000", "10.96.0.10:80", "tcp")
	if tr.Verdict != trace.Dropped || tr.Paths[0].VerdictBy.Verdict != "drop (DROP_IS_CLUSTER_IP)" || !tr.Paths[0].Hops[0].Matched {
		t.Errorf("clusterIP from outside: %s %+v", tr.Verdict, tr.Paths[0].VerdictBy)
	}
}

func TestWalkEmptyService(t *testing.T) {
	build := func(mod func(*State)) *trace.Trace {
		s := newTestState(t)
		addService(t, s, netip.MustParseAddrPort("172.18.0.2:30600"), 6, 4, FlagNodePort|FlagRoutable)
		mod(s)
		return walk(t, s, "172.18.0.100:40000", "172.18.0.2:30600", "tcp")
	}
	if tr := build(func(*State) {}); tr.Verdict != trace.Rejected {
		t.Errorf("built with SERVICE_NO_BACKEND_RESPONSE (tail call 45): %s, want rejected", tr.Verdict)
	}
	if tr := build(func(s *State) { s.Programs[0].TailCalls = []uint32{1, 15} }); tr.Verdict != trace.Dropped ||
		tr.Paths[0].VerdictBy.Verdict != "drop (DROP_NO_SERVICE)" {
		t.Errorf("built without it: %s, want DROP_NO_SERVICE", tr.Verdict)
	}
	if tr := build(func(s *State) { s.Configs[0].EnableNoServiceEndpointsRoutable = false }); tr.Verdict != trace.Local {
		t.Errorf("enable_no_service_endpoints_routable off: %s, want passed to the stack", tr.Verdict)
	}
	if tr := build(func(s *State) {
		s.Configs[0].EnableNoServiceEndpointsRoutable = false
		setValue(t, s, ServiceKey{Address: nodeIP, Port: 30600, Proto: 6}, func(v *ServiceValue) { v.Flags |= uint8(FlagExtLocalScope) })
	}); tr.Verdict != trace.Dropped {
		t.Errorf("eTP=Local without endpoints: %s, want dropped", tr.Verdict)
	} else if by := tr.Paths[0].VerdictBy; by.Function != "handle_nonroutable_endpoints_v4" || !strings.HasPrefix(by.Text, "DROP_NO_SERVICE (Service backend not found)") {
		// Issue 35: the datapath's own drop and reason, not the conntrack lookup before it.
		t.Errorf("eTP=Local without endpoints: dropped by %+v", by)
	}
	if tr := build(func(s *State) { s.Programs[0].TailCalls = []uint32{1, 15} }); tr.Paths[0].VerdictBy.Function != "nodeport_svc_lb4" {
		t.Errorf("built without SERVICE_NO_BACKEND_RESPONSE: dropped by %+v", tr.Paths[0].VerdictBy)
	}
}

func TestWalkAffinity(t *testing.T) {
	s, k := threeBackends(t)
	setValue(t, s, k, func(v *ServiceValue) { v.Flags |= uint8(FlagSessionAffinity); v.BackendID = 300 })
	ak := AffinityKey{ClientIP: client, RevNAT: 7}
	av := AffinityValue{LastUsed: 9_900, BackendID: 3}
	s.Affinity = append(s.Affinity, AffinityEntry{Key: ak, Value: av, Raw: Raw{mustRaw(t, ak), mustRaw(t, av)}})
	mk := AffinityMatchKey{BackendID: 3, RevNAT: 7}
	s.AffinityMatch = append(s.AffinityMatch, AffinityMatchEntry{Key: mk, Raw: Raw{Key: mustRaw(t, mk)}})

	tr := walk(t, s, "172.18.0.100:40000", "172.18.0.2:30510", "tcp")
	if len(tr.Paths) != 1 || tr.Paths[0].Endpoint.Addr() != "10.244.3.7:8080" {
		t.Fatalf("valid affinity: want backend 3 only, got %v", endpoints(tr))
	}
	if !strings.Contains(strings.Join(tr.Notes, "\n"), "depends on time") {
		t.Errorf("no time note: %q", tr.Notes)
	}
	// Expired (last used 9,700 + 300 s <= now 10,000): a new random choice.
	s.Affinity[0].Value.LastUsed = 9_700
	if tr := walk(t, s, "172.18.0.100:40000", "172.18.0.2:30510", "tcp"); len(tr.Paths) != 3 {
		t.Errorf("expired affinity: %d paths, want 3", len(tr.Paths))
	}
	// Valid in time, but the backend is no longer in the match map.
	s.Affinity[0].Value.LastUsed = 9_900
	s.AffinityMatch = nil
	if tr := walk(t, s, "172.18.0.100:40000", "172.18.0.2:30510", "tcp"); len(tr.Paths) != 3 {
		t.Errorf("unmatched affinity: %d paths, want 3", len(tr.Paths))
	}
}

func TestWalkLocalBackendKeepsSource(t *testing.T) {
	s, _ := threeBackends(t)
	ek := EndpointKey{Address: netip.MustParseAddr("10.244.2.6"), Family: EndpointIPv4}
	s.Endpoints = append(s.Endpoints, EndpointEntry{Key: ek, Value: EndpointInfo{Ifindex: 12}, Raw: Raw{Key: mustRaw(t, ek)}})
	tr := walk(t, s, "172.18.0.100:40000", "172.18.0.2:30510", "tcp")
	for _, p := range tr.Paths {
		local := p.Endpoint.IP == "10.244.2.6"
		if local && p.SNAT != "172.18.0.100" || !local && p.SNAT != "172.18.0.2" {
			t.Errorf("%s: SNAT %s", p.Endpoint.Addr(), p.SNAT)
		}
	}
	if tr.SNAT != "" {
		t.Errorf("paths disagree on SNAT, the trace says %q", tr.SNAT)
	}
}

func TestWalkSNATPort(t *testing.T) {
	s, _ := threeBackends(t)
	for sport, want := range map[uint16]string{40000: "sport 40000 kept", 20000: "sport 20000 -> a random port in 32768-65535"} {
		tr := walk(t, s, netip.AddrPortFrom(client, sport).String(), "172.18.0.2:30510", "tcp")
		h := lastHop(tr.Paths[0])
		if h.Table != "cilium_snat_v4_external" || h.Verdict != "masquerade to 172.18.0.2" || !strings.Contains(strings.Join(h.Changes, "\n"), want) {
			t.Errorf("sport %d: %+v", sport, h)
		}
	}
}

func TestWalkNoProgramAssumesDefaults(t *testing.T) {
	s, _ := threeBackends(t)
	s.Programs, s.Configs = nil, nil
	tr := walk(t, s, "172.18.0.100:40000", "172.18.0.2:30510", "tcp")
	if len(tr.Paths) != 3 || len(tr.Notes) == 0 {
		t.Errorf("without programs: %d paths, notes %q", len(tr.Paths), tr.Notes)
	}
}
