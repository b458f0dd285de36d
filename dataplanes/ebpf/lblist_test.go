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
