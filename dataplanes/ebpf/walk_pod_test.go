package ebpf

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// podState is threeBackends plus a ClusterIP 10.96.0.10:80 (rev-NAT 2, same backends, 10.244.2.6 local), the
// node's cilium_host (10.244.2.1) and the local pod's endpoint with its bpf_lxc (Maglev the node's default,
// which bpf_lxc ignores), and the socket LB on the node's cgroup.
func podState(t *testing.T) *State {
	s, _ := threeBackends(t)
	s.Configs[0].LBDefaultAlg = AlgMaglev
	addService(t, s, netip.MustParseAddrPort("10.96.0.10:80"), 6, 2, 0, 1, 2, 3)
	for _, e := range []struct {
		addr  string
		info  EndpointInfo
		iface int
	}{{"10.244.2.6", EndpointInfo{Ifindex: 12, LxcID: 7, SecID: 300}, 12}, {"10.244.2.1", EndpointInfo{Flags: EndpointFlagHost}, 0}} {
		ek := EndpointKey{Address: netip.MustParseAddr(e.addr), Family: EndpointIPv4}
		s.Endpoints = append(s.Endpoints, EndpointEntry{Key: ek, Value: e.info, Raw: Raw{Key: mustRaw(t, ek)}})
	}
	lxcCfg := Config{MapID: 6, LBDefaultAlg: AlgMaglev, EnableNoServiceEndpointsRoutable: true,
		Vars: []ConfigVar{{Name: "service_loopback_ipv4", Raw: Hex{169, 254, 42, 1}}}}
	s.Configs = append(s.Configs, lxcCfg, Config{MapID: 7, EnableNoServiceEndpointsRoutable: true})
	s.Programs = append(s.Programs,
		Program{Interface: "lxc1234", Ifindex: 12, Direction: "ingress", Attach: "tcx", Name: "cil_from_container", ID: 20, ConfigMap: 6},
		Program{Interface: "cilium_host", Ifindex: 4, Addrs: []netip.Prefix{netip.MustParsePrefix("10.244.2.1/32")}, Direction: "egress", Attach: "tcx", Name: "cil_from_host", ID: 21},
		Program{Interface: "cgroup 9", Direction: "connect4", Attach: "cgroup", Name: "cil_sock4_connect", ID: 22, ConfigMap: 7})
	return s
}

func walkFrom(t *testing.T, s *State, src, dst string, fromNode bool) *trace.Trace {
	t.Helper()
	p := trace.Packet{Src: src, Dst: dst, Proto: "tcp"}
	f, err := p.ParseFlow()
	if err != nil {
		t.Fatal(err)
	}
	s = viaJSON(t, s)
	var paths []trace.Path
	var notes []string
	if fromNode {
		paths, notes, _ = WalkSock(s, f, podNames)
	} else {
		paths, notes, _ = WalkFrom(s, f, "", podNames)
	}
	tr := &trace.Trace{Dataplane: "ebpf", Packet: p, Paths: paths, Notes: notes}
	tr.Finish()
	return tr
}

// A pod's packet to a ClusterIP is bpf_lxc's: taken on the pod's veth, balanced at random (bpf_lxc ignores the
// node's Maglev default), kept with its own source, and sent back to itself from the service loopback address.
func TestWalkFromContainer(t *testing.T) {
	tr := walkFrom(t, podState(t), "10.244.2.6:40000", "10.96.0.10:80", false)
	if tr.Verdict != trace.Delivered || len(tr.Paths) != 3 {
		t.Fatalf("verdict %s, %d paths: %+v", tr.Verdict, len(tr.Paths), tr.Paths)
	}
	for _, p := range tr.Paths {
		if h := p.Hops[0]; h.Chain != "cil_from_container" || h.Hook != "tcx ingress lxc1234" {
			t.Errorf("first hop %s %s, want bpf_lxc's on the pod's veth", h.Hook, h.Chain)
		}
		if p.Probability != 1.0/3 {
			t.Errorf("%s: chance %v, want 1/3 (random)", p.Endpoint.Addr(), p.Probability)
		}
		want := "10.244.2.6"
		if p.Endpoint.IP == "10.244.2.6" {
			want = "169.254.42.1"
		}
		if p.SNAT != want {
			t.Errorf("%s: the pod sees %s, want %s", p.Endpoint.Addr(), p.SNAT, want)
		}
		local := strings.Contains(p.Egress, "endpoint 7")
		if local != (p.Endpoint.IP == "10.244.2.6") {
			t.Errorf("%s: egress %q", p.Endpoint.Addr(), p.Egress)
		}
		if p.Reply == nil || p.Reply.AsSeenFrom != "10.96.0.10:80" {
			t.Errorf("%s: reply %+v, want it seen from the ClusterIP", p.Endpoint.Addr(), p.Reply)
		}
	}
	if !strings.Contains(strings.Join(tr.Notes, " "), "bpf_lxc's default selection is random") {
		t.Errorf("notes %q do not say bpf_lxc ignores the Maglev default", tr.Notes)
	}
}

// A connection the node opens goes through the socket LB: connect() is sent to a backend, with the source
// the route to it gives (cilium_host's for a pod of the node).
func TestWalkSock(t *testing.T) {
	tr := walkFrom(t, podState(t), "172.18.0.2", "10.96.0.10:80", true)
	if tr.Verdict != trace.Delivered || len(tr.Paths) != 3 {
		t.Fatalf("verdict %s, %d paths", tr.Verdict, len(tr.Paths))
	}
	for _, p := range tr.Paths {
		if h := p.Hops[0]; h.Chain != "cil_sock4_connect" || h.Hook != "cgroup connect4" {
			t.Errorf("first hop %s %s, want the socket LB's", h.Hook, h.Chain)
		}
		want := "172.18.0.2"
		if p.Endpoint.IP == "10.244.2.6" {
			want = "10.244.2.1"
		}
		if p.SNAT != want {
			t.Errorf("%s: source %s, want %s", p.Endpoint.Addr(), p.SNAT, want)
		}
	}
	// Without the socket LB attached, the walk cannot stand behind a path.
	s := podState(t)
	s.Programs = s.Programs[:len(s.Programs)-1]
	w := walkerOf{st: s, node: "node-2"}
	f, _ := trace.Packet{Src: "172.18.0.2", Dst: "10.96.0.10:80", Proto: "tcp"}.ParseFlow()
	if _, _, _, err := w.Walk(f, "", true, nil); err == nil || !strings.Contains(err.Error(), "no cil_sock4_connect") {
		t.Errorf("from a node without bpf_sock: %v", err)
	}
	// A Service without backends fails connect() at once.
	s = podState(t)
	addService(t, s, netip.MustParseAddrPort("10.96.0.11:80"), 6, 3, 0)
	if tr := walkFrom(t, s, "172.18.0.2", "10.96.0.11:80", true); tr.Verdict != trace.Rejected {
		t.Errorf("no backends: verdict %s, want rejected (EHOSTUNREACH)", tr.Verdict)
	}
}
