package ebpf

import (
	"encoding/hex"
	"net/netip"
	"strings"
	"testing"
)

func TestLBList(t *testing.T) {
	s := newTestState(t)
	addBackend(t, s, 1, "10.244.1.6:80", BackendActive)
	addBackend(t, s, 2, "10.244.2.9:8080", BackendActive)
	// Entries in an order the listing must not keep (cilium-dbg prints in map order; LBList sorts).
	addService(t, s, netip.MustParseAddrPort("0.0.0.0:30510"), 6, 3, FlagNodePort, 1)
	addService(t, s, netip.MustParseAddrPort("172.18.0.2:30510"), 6, 2, FlagNodePort|FlagRoutable, 1)
	addService(t, s, netip.MustParseAddrPort("10.96.0.1:443"), 6, 1, FlagSessionAffinity|FlagIntLocalScope, 2)
	s.Services = append(s.Services, ServiceEntry{Key: ServiceKey{Address: netip.MustParseAddr("10.96.0.1"), Port: 443, Proto: 6, Slot: 2},
		Value: ServiceValue{BackendID: 42, RevNAT: 1}})
	// An internal-scope frontend of a two-scope service, and an L7 one.
	addService(t, s, netip.MustParseAddrPort("10.96.0.20:53"), 17, 5, FlagRoutable|FlagTwoScopes|FlagL7LoadBalancer)
	setValue(t, s, ServiceKey{Address: netip.MustParseAddr("10.96.0.20"), Port: 53, Proto: 17}, func(v *ServiceValue) {
		v.BackendID = uint32(ntohs(15001)) // the proxy port, a __be16 in the union
	})
	s.Services[len(s.Services)-1].Key.Scope = ScopeInternal

	// What cilium-dbg's tabwriter (minwidth 5, padding 3) makes of it; "·" marks a trailing space.
	want := strings.ReplaceAll(`SERVICE ADDRESS            BACKEND ADDRESS (REVNAT_ID) (SLOT)
0.0.0.0:30510/TCP (0)      0.0.0.0:0 (3) (0) [NodePort, non-routable]·············································
0.0.0.0:30510/TCP (1)      10.244.1.6:80/TCP (3) (1)······························································
10.96.0.1:443/TCP (0)      0.0.0.0:0 (1) (0) [ClusterIP, InternalLocal, sessionAffinity, non-routable]············
10.96.0.1:443/TCP (1)      10.244.2.9:8080/TCP (1) (1)····························································
10.96.0.1:443/TCP (2)      backend 42 not found···································································
10.96.0.20:53/UDP/i (0)    0.0.0.0:0 (5) (0) [ClusterIP, two-scopes, l7-load-balancer] (L7LB Proxy Port: 15001)···
172.18.0.2:30510/TCP (0)   0.0.0.0:0 (2) (0) [NodePort]···························································
172.18.0.2:30510/TCP (1)   10.244.1.6:80/TCP (2) (1)······························································
`, "·", " ")
	got := LBList(s)
	gotLines, wantLines := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(gotLines), len(wantLines)) {
		var g, w string
		if i < len(gotLines) {
			g = gotLines[i]
		}
		if i < len(wantLines) {
			w = wantLines[i]
		}
		if g != w {
			t.Errorf("line %d:\n got %q\nwant %q", i, g, w)
		}
	}

	wide := LBListWide(s)
	for _, frag := range []string{"KEY", "ac120002772e000006000000", "0af401060050060000000000"} {
		if !strings.Contains(wide, frag) {
			t.Errorf("wide listing lacks %q:\n%s", frag, wide)
		}
	}
}

func TestServiceFlagsString(t *testing.T) {
	for f, want := range map[ServiceFlags]string{
		FlagNodePort | FlagRoutable: "NodePort",
		FlagNodePort:                "NodePort, non-routable",
		FlagLoadBalancer | FlagRoutable | FlagExtLocalScope | FlagTwoScopes: "LoadBalancer, Local, two-scopes",
		FlagHostPort | FlagRoutable | FlagLoopback:                          "HostPort, loopback",
		FlagRoutable | FlagLoopback:                                         "ClusterIP, delegate-if-local",
		FlagRoutable | FlagSourceRange | FlagSourceRangeDeny:                "ClusterIP, check source-range, deny",
		FlagRoutable | FlagQuarantined:                                      "ClusterIP, quarantined",
		FlagExternalIPs | FlagRoutable | FlagFwdModeDSR | FlagNat46x64:      "ExternalIPs, 46x64, dsr",
	} {
		if got := f.String(); got != want {
			t.Errorf("%#x: %q, want %q", uint16(f), got, want)
		}
	}
}

// TestEndpointList prints cilium_lxc as cilium-dbg bpf endpoint list does: the value bytes of a pod endpoint
// (endpoint_info: ifindex 5, lxc_id 3, flags 0, mac at 16, node_mac at 24, sec_id 11616 at 32) and a host entry.
func TestEndpointList(t *testing.T) {
	val, _ := hex.DecodeString("05000000000003000000000000000000626f7ae59d340000aa7ababf60380000602d00000000000000000000")
	s := &State{Endpoints: []EndpointEntry{
		{Key: EndpointKey{Address: netip.MustParseAddr("10.244.1.2"), Family: EndpointIPv4}, Value: EndpointInfo{Ifindex: 5, LxcID: 3, SecID: 11616}, Raw: Raw{Value: val}},
		{Key: EndpointKey{Address: netip.MustParseAddr("172.18.0.3"), Family: EndpointIPv4}, Value: EndpointInfo{Flags: EndpointFlagHost}},
	}}
	want := "IP ADDRESS     LOCAL ENDPOINT INFO\n" +
		"10.244.1.2:0   id=3     sec_id=11616 flags=0x0000 ifindex=5   mac=62:6F:7A:E5:9D:34 nodemac=AA:7A:BA:BF:60:38 parent_ifindex=0   rt_info:0\n" +
		"172.18.0.3:0   (localhost)\n"
	if got := EndpointList(s); got != want {
		t.Errorf("EndpointList:\n%s\nwant:\n%s", got, want)
	}
	if m := EndpointMap(s); len(m) != 2 || m["172.18.0.3:0"][0] != "(localhost)" {
		t.Errorf("EndpointMap: %v", m)
	}
}

func TestServiceList(t *testing.T) {
	s := newTestState(t)
	addBackend(t, s, 1, "10.244.1.6:80", BackendActive)
	addBackend(t, s, 2, "10.244.2.9:80", BackendTerminating)
	addService(t, s, netip.MustParseAddrPort("172.18.0.2:30510"), 6, 4, FlagNodePort|FlagRoutable, 1, 2)
	addService(t, s, netip.MustParseAddrPort("10.96.0.10:80"), 6, 3, FlagRoutable, 1, 2, 9)
	addService(t, s, netip.MustParseAddrPort("10.96.0.11:80"), 6, 5, FlagRoutable)
	want := "ID   Frontend               Service Type   Backend\n" +
		"3    10.96.0.10:80/TCP      ClusterIP      1 => 10.244.1.6:80/TCP (active)\n" +
		"                                           2 => 10.244.2.9:80/TCP (terminating)\n" +
		"                                           3 => backend 9 not found\n" +
		"4    172.18.0.2:30510/TCP   NodePort       1 => 10.244.1.6:80/TCP (active)\n" +
		"                                           2 => 10.244.2.9:80/TCP (terminating)\n" +
		"5    10.96.0.11:80/TCP      ClusterIP\n"
	if got := ServiceList(s); got != want {
		t.Errorf("ServiceList:\n%s\nwant:\n%s", got, want)
	}
	if l := Services(s); len(l) != 3 || l[2].Backends == nil || l[1].Flags != "NodePort" {
		t.Errorf("Services: %+v (a frontend without backends must have [] for JSON)", l)
	}
}

func TestCTListCountsWhatWasNotCollected(t *testing.T) {
	s := &State{CT: []CTRow{{Map: MapCT, Key: CTTuple{Daddr: netip.MustParseAddr("172.18.0.1"), Saddr: netip.MustParseAddr("10.244.1.6"),
		Dport: 80, Sport: 40000, Nexthdr: 6, Flags: TupleOut}, Value: CTEntry{RevNAT: 4, Flags: CTNodePort, FlagNames: []string{"node_port"}}}}, CTOther: 7}
	got := CTList(s)
	for _, frag := range []string{"TCP OUT 172.18.0.1:40000 -> 10.244.1.6:80 expires=0", "[ node_port ] RevNAT=4", "(7 more entries"} {
		if !strings.Contains(got, frag) {
			t.Errorf("CTList lacks %q:\n%s", frag, got)
		}
	}
}

// The socket LB's entries decode from the bytes bpf_sock writes (cookie in host order, address and ports in
// network order) and list as cilium-dbg's socknat list, with ports that read as ports.
func TestSockNATList(t *testing.T) {
	raw, _ := hex.DecodeString("d7230000000000000af4030200500000") // cookie 9175, 10.244.3.2:80
	val, _ := hex.DecodeString("0a609cb400500002")                 // 10.96.156.180:80, rev-NAT 2
	var e SockRevNATEntry
	if err := e.Key.UnmarshalBinary(raw); err != nil {
		t.Fatal(err)
	}
	if err := e.Value.UnmarshalBinary(val); err != nil {
		t.Fatal(err)
	}
	if k, _ := e.Key.MarshalBinary(); hex.EncodeToString(k) != hex.EncodeToString(raw) {
		t.Errorf("key round trip: %x, want %x", k, raw)
	}
	if v, _ := e.Value.MarshalBinary(); hex.EncodeToString(v) != hex.EncodeToString(val) {
		t.Errorf("value round trip: %x, want %x", v, val)
	}
	s := &State{SockRevNAT: []SockRevNATEntry{e}}
	want := "Socket Cookie   Backend -> Frontend\n9175            10.244.3.2:80 -> 10.96.156.180:80 (revnat=2)\n"
	if got := SockNATList(s); got != want {
		t.Errorf("SockNATList:\n%q\nwant\n%q", got, want)
	}
	if m := SockNATMap(s); len(m["9175"]) != 1 {
		t.Errorf("SockNATMap: %v", m)
	}
}
