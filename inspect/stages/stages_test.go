package stages_test

import (
	"compress/gzip"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/stages"
	"github.com/k8sguide/k8sguide/inspect/tracer"
)

// The golden test's snapshots (cmd/k8sguide/app/testdata) and the IPVS VM's, traced in-process as the golden test
// traces them.
const (
	app  = "../../cmd/k8sguide/app/testdata/"
	ipvs = "../../dataplanes/ipvs/testdata/"
)

func traceOf(t *testing.T, file, dst, from string) *trace.Trace {
	t.Helper()
	s, err := tracer.LoadFile(file, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tracer.Trace(s, tracer.Request{Dst: dst, From: from})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// want is a stage's expected text: Text, then each variant as "label: text" (Stage.All).
type want map[string][]string

func check(t *testing.T, got []stages.Stage, w want) {
	t.Helper()
	var keys []string
	for _, s := range got {
		keys = append(keys, s.Key)
		if s.Title == "" || s.Guide == "" {
			t.Errorf("stage %s: title %q, guide %q: want both", s.Key, s.Title, s.Guide)
		}
	}
	if strings.Join(keys, " ") != strings.Join(stages.Keys, " ") {
		t.Errorf("stages %v, want %v", keys, stages.Keys)
	}
	for key, lines := range w {
		s := stages.Find(got, key)
		if g := strings.Join(s.All(), "\n"); g != strings.Join(lines, "\n") {
			t.Errorf("stage %s:\n got %s\nwant %s", key, strings.ReplaceAll(g, "\n", "\n     "), strings.Join(lines, "\n     "))
		}
	}
}

func TestIPTablesNodePort(t *testing.T) {
	got := stages.Of(traceOf(t, app+"iptables-worker2.v1.json", "172.18.0.4:31758", "client"))
	check(t, got, want{
		stages.Match:   {"KUBE-SERVICES rule 2 (addrtype LOCAL) → KUBE-NODEPORTS; KUBE-NODEPORTS rule 2 (--dport 31758) → KUBE-EXT-LOLE4ISW44XBNF3G"},
		stages.Service: {"default/web:80: KUBE-EXT-LOLE4ISW44XBNF3G rule 2 → KUBE-SVC-LOLE4ISW44XBNF3G"},
		stages.Choice: {
			"KUBE-SVC-LOLE4ISW44XBNF3G: statistic --mode random cascade, rule 2 0.33333333349, rule 3 0.50000000000, rule 4 the rest",
			"10.244.1.2:80 (other node): rule 2 → KUBE-SEP-MQ4W7Q2CV67URU6Q (33.33%)",
			"10.244.1.3:80 (other node): rule 3 → KUBE-SEP-MHDQ23KUGG7EGFMW (33.33%)",
			"10.244.2.2:80 (this node): rule 4 → KUBE-SEP-QHWUG6SOC7OJ2BZK (33.33%)",
		},
		stages.DNAT: {
			"10.244.1.2:80 (other node): KUBE-SEP-MQ4W7Q2CV67URU6Q rule 2: dnat to 10.244.1.2:80",
			"10.244.1.3:80 (other node): KUBE-SEP-MHDQ23KUGG7EGFMW rule 2: dnat to 10.244.1.3:80",
			"10.244.2.2:80 (this node): KUBE-SEP-QHWUG6SOC7OJ2BZK rule 2: dnat to 10.244.2.2:80",
		},
		// The remote pods are masqueraded to the node's address, the local one to the bridge's: not flattened.
		stages.SNAT: {
			"mark 0x4000: KUBE-EXT-LOLE4ISW44XBNF3G rule 1 → KUBE-MARK-MASQ",
			"10.244.1.2:80, 10.244.1.3:80 (other nodes): KUBE-POSTROUTING rule 3: masquerade to 172.18.0.4",
			"10.244.2.2:80 (this node): KUBE-POSTROUTING rule 3: masquerade to 10.244.2.1",
		},
		stages.Source: {
			"10.244.1.2:80, 10.244.1.3:80 (other nodes): 172.18.0.4",
			"10.244.2.2:80 (this node): 10.244.2.1",
		},
		stages.Reply: {
			"10.244.1.2:80, 10.244.1.3:80 (other nodes): the pod answers 172.18.0.4:PORT'; conntrack turns it into 172.18.0.4:31758 → 172.18.0.1:PORT",
			"10.244.2.2:80 (this node): the pod answers 10.244.2.1:PORT'; conntrack turns it into 172.18.0.4:31758 → 172.18.0.1:PORT",
		},
	})
	// The hops a stage names are the trace's: the NodePort rule is a hop every path shares.
	m := stages.Find(got, stages.Match)
	if len(m.Hops) != 2 || m.Hops[1].Path != 0 || m.Hops[1].At != "nat/KUBE-NODEPORTS rule 2" {
		t.Errorf("match stage's hops: %+v", m.Hops)
	}
	if s := stages.Find(got, stages.SNAT); !strings.Contains(s.Guide, "KUBE-EXT") {
		t.Errorf("SNAT's guide sentence does not say the mark moved to KUBE-EXT: %q", s.Guide)
	}
}

func TestIPTablesClusterIPFromPod(t *testing.T) {
	got := stages.Of(traceOf(t, app+"iptables-worker2.v1.json", "10.96.99.110:80", "pod/web-6b4fbbd7c4-97h9q"))
	check(t, got, want{
		stages.Match:   {"KUBE-SERVICES rule 1 (-d 10.96.99.110/32, --dport 80) → KUBE-SVC-LOLE4ISW44XBNF3G"},
		stages.Service: {"default/web:80: KUBE-SERVICES rule 1 → KUBE-SVC-LOLE4ISW44XBNF3G"},
		// Only the hairpin (the pod reaching itself) is masqueraded, marked in its KUBE-SEP chain.
		stages.SNAT: {
			"10.244.1.2:80, 10.244.1.3:80 (other nodes): none: KUBE-POSTROUTING rule 1 returns (no mark 0x4000)",
			"10.244.2.2:80 (this node): mark 0x4000: KUBE-SEP-QHWUG6SOC7OJ2BZK rule 1 → KUBE-MARK-MASQ; KUBE-POSTROUTING rule 3: masquerade to 10.244.2.1",
		},
		stages.Source: {
			"10.244.1.2:80, 10.244.1.3:80 (other nodes): 10.244.2.2 (the sender's own)",
			"10.244.2.2:80 (this node): 10.244.2.1",
		},
	})
	if s := stages.Find(got, stages.Service); strings.Contains(s.Guide, "KUBE-EXT") {
		t.Errorf("a ClusterIP trace has no KUBE-EXT hop, yet the guide sentence names it: %q", s.Guide)
	}
}

func TestNFTablesNodePort(t *testing.T) {
	check(t, stages.Of(traceOf(t, app+"nftables-worker2.v1.json", "172.18.0.4:30666", "client")), want{
		stages.Match:   {"services rule 3 (fib daddr type local, @service-nodeports map) → external-PFISGYVC-default/web/tcp/"},
		stages.Service: {"default/web:80: external-PFISGYVC-default/web/tcp/ rule 2 → service-PFISGYVC-default/web/tcp/"},
		stages.Choice: {
			"service-PFISGYVC-default/web/tcp/ rule 1: numgen random mod 3 map",
			"10.244.1.2:80 (other node): gave 0 → 10.244.1.2:80 (33.33%)",
			"10.244.1.3:80 (other node): gave 1 → 10.244.1.3:80 (33.33%)",
			"10.244.2.2:80 (this node): gave 2 → 10.244.2.2:80 (33.33%)",
		},
		stages.DNAT: {
			"service-PFISGYVC-default/web/tcp/ rule 1:",
			"10.244.1.2:80 (other node): dnat to 10.244.1.2:80",
			"10.244.1.3:80 (other node): dnat to 10.244.1.3:80",
			"10.244.2.2:80 (this node): dnat to 10.244.2.2:80",
		},
		stages.SNAT: {
			"mark 0x4000: external-PFISGYVC-default/web/tcp/ rule 1",
			"10.244.1.2:80, 10.244.1.3:80 (other nodes): masquerading rule 1: masquerade to 172.18.0.4",
			"10.244.2.2:80 (this node): masquerading rule 1: masquerade to 10.244.2.1",
		},
		stages.Source: {
			"10.244.1.2:80, 10.244.1.3:80 (other nodes): 172.18.0.4",
			"10.244.2.2:80 (this node): 10.244.2.1",
		},
	})
}

func TestNFTablesClusterIPFromPod(t *testing.T) {
	check(t, stages.Of(traceOf(t, app+"nftables-worker2.v1.json", "10.96.98.206:80", "pod/web-6b4fbbd7c4-vdgm8")), want{
		stages.Match:   {"services rule 2 (@service-ips map) → service-PFISGYVC-default/web/tcp/"},
		stages.Service: {"default/web:80: services rule 2 → service-PFISGYVC-default/web/tcp/"},
		stages.SNAT: {
			"10.244.1.2:80, 10.244.1.3:80 (other nodes): none: no POSTROUTING rule masquerades",
			"10.244.2.2:80 (this node): masquerading rule 2: masquerade to 10.244.2.1",
		},
	})
}

func TestIPVSNodePort(t *testing.T) {
	check(t, stages.Of(traceOf(t, ipvs+"vm-snapshot-traced.json", "172.18.0.2:30080", "client")), want{
		stages.Match:   {"KUBE-SERVICES rule 3 (addrtype LOCAL) → KUBE-NODE-PORT; KUBE-NODE-PORT rule 1 (ipset KUBE-NODE-PORT-TCP) → KUBE-MARK-MASQ"},
		stages.Service: {"default/web:http: IPVS virtual server TCP 172.18.0.2:30080 rr"},
		stages.Choice: {
			"IPVS scheduler rr (round robin: every 3rd new connection, in list order)",
			"10.244.0.4:8080 (this node): turn 1 → real server 10.244.0.4:8080 (33.33%)",
			"10.244.0.3:8080 (this node): turn 2 → real server 10.244.0.3:8080 (33.33%)",
			"10.244.0.2:8080 (this node): turn 3 → real server 10.244.0.2:8080 (33.33%)",
		},
		stages.DNAT: {
			"10.244.0.4:8080 (this node): IPVS real server 10.244.0.4:8080 Masq: dnat to 10.244.0.4:8080",
			"10.244.0.3:8080 (this node): IPVS real server 10.244.0.3:8080 Masq: dnat to 10.244.0.3:8080",
			"10.244.0.2:8080 (this node): IPVS real server 10.244.0.2:8080 Masq: dnat to 10.244.0.2:8080",
		},
		stages.SNAT:   {"mark 0x4000: KUBE-NODE-PORT rule 1 → KUBE-MARK-MASQ; KUBE-POSTROUTING rule 4: masquerade to 10.244.0.1"},
		stages.Source: {"10.244.0.1"},
		stages.Reply:  {"the pod answers 10.244.0.1:PORT'; conntrack, then IPVS's connection entry turns it into 172.18.0.2:30080 → 172.18.0.1:PORT"},
	})
}

func TestEBPFNodePort(t *testing.T) {
	check(t, stages.Of(traceOf(t, app+"ebpf-worker2.v1.json", "172.18.0.4:30464", "client")), want{
		stages.Match:   {"cilium_lb4_services_v2 lookup (nodeport_lb4 → lb4_lookup_service): 172.18.0.4:30464/TCP [NodePort]"},
		stages.Service: {"default/web:80: slot 0 of cilium_lb4_services_v2: 3 backends, rev-NAT 3"},
		stages.Choice: {
			"lb4_select_backend_id_random: slot = get_prandom_u32() % 3 + 1",
			"10.244.1.2:80 (other node): slot 1 → backend 1 (33.33%)",
			"10.244.1.3:80 (other node): slot 2 → backend 2 (33.33%)",
			"10.244.2.2:80 (this node): slot 3 → backend 3 (33.33%)",
		},
		stages.DNAT: {
			"lb4_lookup_backend → lb4_dnat_request → lb4_xlate (cilium_lb4_backends_v3):",
			"10.244.1.2:80 (other node): dnat to 10.244.1.2:80",
			"10.244.1.3:80 (other node): dnat to 10.244.1.3:80",
			"10.244.2.2:80 (this node): dnat to 10.244.2.2:80",
		},
		stages.SNAT:   {"tail_nodeport_nat_egress_ipv4 (cilium_snat_v4_external): masquerade to 172.18.0.4"},
		stages.Source: {"172.18.0.4"},
		stages.Reply:  {"the pod answers 172.18.0.4:PORT'; cilium_snat_v4_external, then cilium_lb4_reverse_nat[3] turns it into 172.18.0.4:30464 → 172.18.0.1:PORT"},
	})
}

// This snapshot predates the lab's Cilium endpoints: its pods' packets meet bpf_host on cni0, whose frontend
// lookup drops a ClusterIP. Every stage after the drop says none, and why; none guesses.
func TestEBPFClusterIPFromPodDropped(t *testing.T) {
	drop := "none: dropped by cil_from_netdev: DROP_IS_CLUSTER_IP (Is a ClusterIP) after nodeport_lb4 → lb4_lookup_service"
	check(t, stages.Of(traceOf(t, app+"ebpf-worker2.v1.json", "10.96.197.157:80", "pod/web-6b4fbbd7c4-dr8jk")), want{
		stages.Match:   {"cilium_lb4_services_v2 lookup (nodeport_lb4 → lb4_lookup_service): 10.96.197.157:80/TCP: drop (DROP_IS_CLUSTER_IP)"},
		stages.Service: {drop}, stages.Choice: {drop}, stages.DNAT: {drop}, stages.SNAT: {drop}, stages.Source: {drop}, stages.Reply: {drop},
	})
}

// A trace that lacks the hops a stage needs (a pasted ipvsadm -Ln: the IPVS table, no iptables rules) says the
// stage is not known, rather than what kube-proxy usually does.
func TestPastedIPVSAdmLacksRules(t *testing.T) {
	s, err := tracer.LoadFile(ipvs+"vm-ipvsadm-Ln.txt", nil, []netip.Addr{netip.MustParseAddr("172.18.0.2")})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tracer.Trace(s, tracer.Request{Dst: "172.18.0.2:30080"})
	if err != nil {
		t.Fatal(err)
	}
	check(t, stages.Of(tr), want{
		stages.Match: {stages.Unknown},
		stages.SNAT:  {stages.Unknown},
	})
}

// A kind lab's real Cilium 1.20.2 (cd-worker2, `k8sguide snapshot`, gzipped; testdata/README names it): a pod's
// connection to the ClusterIP goes through the socket LB, whose selection (sock_select_slot) is the choice stage,
// as bpf_lxc's lb4_select_backend_id is on the netns lab. It was "not known from this trace".
func TestEBPFClusterIPFromPodSocketLB(t *testing.T) {
	f := gunzipped(t, "testdata/kind-ebpf-worker2.v1.json.gz")
	got := stages.Of(traceOf(t, f, "10.96.66.180:80", "pod/web-85bffcdccf-dndtf"))
	check(t, got, want{
		stages.Choice: {
			"sock_select_slot, __lb4_lookup_backend_slot: get_prandom_u32() % 3 + 1",
			"10.244.1.16:80 (other node): slot 1 → backend 9 (33.33%)",
			"10.244.1.52:80 (other node): slot 2 → backend 10 (33.33%)",
			"10.244.2.91:80 (this node): slot 3 → backend 11 (33.33%)",
		},
		stages.SNAT:   {"none: no SNAT on this path"},
		stages.Source: {"10.244.2.91 (the sender's own)"},
	})
	if g := stages.Find(got, stages.Choice).Guide; !strings.Contains(g, "sock_select_slot") {
		t.Errorf("the choice stage's guide note does not name the socket LB's choice: %q", g)
	}
}

func gunzipped(t *testing.T, file string) string {
	t.Helper()
	in, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	z, err := gzip.NewReader(in)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(z)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(file), ".gz"))
	if err := os.WriteFile(out, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPolicyLocalAndAffinity (issue 35): a traffic policy of Local and session affinity narrow the choice, and
// the explanation says so; before, both read "its only endpoint" (or "every endpoint gets 1/N").
func TestPolicyLocalAndAffinity(t *testing.T) {
	tr := traceOf(t, "testdata/netns-nftables-etp-local-worker2.json", "172.18.0.4:32242", "client")
	if len(tr.Endpoints) != 1 || tr.Endpoints[0].Addr() != "10.244.4.2:80" || tr.Paths[0].LocalOnly == "" {
		t.Fatalf("endpoints %+v, local only %q", tr.Endpoints, tr.Paths[0].LocalOnly)
	}
	got := stages.Of(tr)
	if g := stages.Find(got, stages.Choice).Guide; !strings.HasPrefix(g, "Only among this node's endpoints") {
		t.Errorf("choice: %q", g)
	}
	if s := stages.Find(got, stages.Service); !strings.Contains(s.Text, "local-") || !strings.Contains(s.Guide, "traffic policy of Local") {
		t.Errorf("service: %q / %q", s.Text, s.Guide)
	}
	tr = traceOf(t, "testdata/netns-iptables-etp-local-worker.json", "172.18.0.3:32168", "client")
	if len(tr.Endpoints) != 2 || tr.Paths[0].LocalOnly == "" {
		t.Fatalf("iptables: endpoints %+v, local only %q", tr.Endpoints, tr.Paths[0].LocalOnly)
	}
	got = stages.Of(tr)
	if c := stages.Find(got, stages.Choice); !strings.Contains(c.Text, "KUBE-SVL-") || !strings.Contains(c.Guide, "statistic --mode random") || !strings.HasPrefix(c.Guide, "Only among") {
		t.Errorf("iptables choice: %q / %q", c.Text, c.Guide)
	}
	tr = traceOf(t, "testdata/netns-nftables-affinity-worker.json", "172.18.0.3:32242", "client")
	if len(tr.Endpoints) != 1 || tr.Endpoints[0].Addr() != "10.244.2.3:80" || tr.Paths[0].Affinity == "" {
		t.Fatalf("endpoints %+v, affinity %q", tr.Endpoints, tr.Paths[0].Affinity)
	}
	got = stages.Of(tr)
	if c := stages.Find(got, stages.Choice); !strings.Contains(c.Text, "session affinity") || !strings.HasPrefix(c.Guide, "Session affinity") {
		t.Errorf("choice: %q / %q", c.Text, c.Guide)
	}
}

// TestNotKubeProxyDNAT (issue 35): a Docker host's published port (inspect/tracer/testdata/readings, captured
// from real dockerds) is DNATed by Docker's own rule: the guide's sentence names that rule and never a Service
// chain or numgen map the rules do not have.
func TestNotKubeProxyDNAT(t *testing.T) {
	for file, at := range map[string]string{
		"docker29-nftables.nft":      "nat-prerouting-and-output rule 1",
		"docker20-iptables-save.txt": "DOCKER rule 2",
	} {
		raw, err := os.ReadFile("../tracer/testdata/readings/" + file)
		if err != nil {
			t.Fatal(err)
		}
		s, err := tracer.Load(raw, []netip.Addr{netip.MustParseAddr("10.35.0.10")})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := tracer.Trace(s, tracer.Request{Dst: "10.35.0.10:8080", Src: "10.35.0.20", InIface: "eth0", OutIface: "docker0"})
		if err != nil {
			t.Fatal(err)
		}
		d := stages.Find(stages.Of(tr), stages.DNAT)
		if !strings.Contains(d.Guide, "rewritten by "+at) || strings.Contains(d.Guide, "numgen") || strings.Contains(d.Guide, "KUBE-SEP chain DNATs") {
			t.Errorf("%s: DNAT %q, guide %q: want Docker's own rule named", file, d.Text, d.Guide)
		}
	}
}
