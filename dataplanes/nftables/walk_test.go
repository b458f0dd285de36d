package nftables

import (
	"math"
	"os"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// hopOf returns the first hop of path p in chain at rule position rule (nil when the path has none).
func hopOf(p trace.Path, chain string, rule int) *trace.Hop {
	for i, h := range p.Hops {
		if h.Chain == chain && h.Rule == rule {
			return &p.Hops[i]
		}
	}
	return nil
}

func pathTo(t *testing.T, tr *trace.Trace, endpoint string) trace.Path {
	t.Helper()
	for _, p := range tr.Paths {
		if p.Endpoint != nil && p.Endpoint.Addr() == endpoint {
			return p
		}
	}
	t.Fatalf("no path to %s:\n%s", endpoint, dump(tr))
	return trace.Path{}
}

func wantReason(t *testing.T, p trace.Path, chain string, rule int, reason string) {
	t.Helper()
	h := hopOf(p, chain, rule)
	switch {
	case h == nil:
		t.Errorf("%s rule %d was not evaluated", chain, rule)
	case h.Matched:
		t.Errorf("%s rule %d matched; want it not to: %s", chain, rule, reason)
	case h.Reason != reason:
		t.Errorf("%s rule %d: reason %q, want %q", chain, rule, h.Reason, reason)
	}
}

// The capture of the brief: node t2-worker (172.18.0.3), default/web NodePort 30696, endpoints 10.244.1.2:80
// and 10.244.1.3:80 on this node, 10.244.2.2:80 on t2-worker2.
func t2Worker(t *testing.T) (*Ruleset, func(src, dst string, o netfilter.Origin) *trace.Trace) {
	rs := loadFixture(t, "nftables-worker", true)
	rs.Leave(nil)
	st := nodeState(t, "nftables-worker")
	return rs, func(src, dst string, o netfilter.Origin) *trace.Trace {
		return walkFlow(t, rs, st, src, dst, "tcp", o)
	}
}

// TestNodePortFromClient: three paths of exactly 1/3, one per endpoint; the client's source is masqueraded to
// the address the node leaves with (cni0's 10.244.1.1 for its own pods, eth0's 172.18.0.3 towards the
// other node); every rule evaluated is recorded, with the reason the others did not match.
func TestNodePortFromClient(t *testing.T) {
	_, walk := t2Worker(t)
	tr := walk("172.18.0.1:40002", "172.18.0.3:30696", netfilter.Origin{Iif: "eth0"})
	if len(tr.Paths) != 3 {
		t.Fatalf("%d paths, want 3:\n%s", len(tr.Paths), dump(tr))
	}
	if tr.Verdict != trace.Delivered || tr.Service != "default/web" {
		t.Errorf("verdict %s service %q", tr.Verdict, tr.Service)
	}
	want := map[string]string{"10.244.1.2:80": "10.244.1.1", "10.244.1.3:80": "10.244.1.1", "10.244.2.2:80": "172.18.0.3"}
	for ep, snat := range want {
		p := pathTo(t, tr, ep)
		if p.Probability != 1.0/3 {
			t.Errorf("%s: probability %v, want exactly 1/3", ep, p.Probability)
		}
		if p.SNAT != snat {
			t.Errorf("%s: the pod sees %s, want %s", ep, p.SNAT, snat)
		}
		if p.Verdict != trace.Delivered {
			t.Errorf("%s: verdict %s", ep, p.Verdict)
		}
		wantReason(t, p, "services", 1, "ip daddr 172.18.0.3 is not in set @cluster-ips")
		wantReason(t, p, "services", 2, "172.18.0.3 . tcp . 30696 is not in map @service-ips")
		wantReason(t, p, "firewall-check", 1, "172.18.0.3 . tcp . 30696 is not in map @firewall-ips")
		h := hopOf(p, "service-PFISGYVC-default/web/tcp/", 1)
		if h == nil || !h.Matched || h.Probability != 1.0/3 || h.Verdict != "dnat to "+ep || h.Service != "default/web" {
			t.Errorf("%s: dnat hop %+v", ep, h)
		}
		h = hopOf(p, "services", 3)
		if h == nil || !h.Matched || h.Verdict != "goto external-PFISGYVC-default/web/tcp/" || h.Service != "default/web" {
			t.Errorf("%s: nodeport vmap hop %+v", ep, h)
		}
		h = hopOf(p, "external-PFISGYVC-default/web/tcp/", 1)
		if h == nil || len(h.Changes) != 1 || h.Changes[0] != "mark 0x0 -> 0x4000" {
			t.Errorf("%s: mark hop %+v", ep, h)
		}
		h = hopOf(p, "masquerading", 1)
		if h == nil || !h.Matched || h.Verdict != "masquerade to "+snat {
			t.Errorf("%s: masquerade hop %+v", ep, h)
		}
		if h := hopOf(p, "filter-forward", 0); h == nil || h.Text != "policy accept" || h.Verdict != "policy accept" {
			t.Errorf("%s: no filter-forward policy hop: %+v", ep, h)
		}
	}
	var sum float64
	for _, e := range tr.Endpoints {
		sum += e.Probability
	}
	if len(tr.Endpoints) != 3 || math.Abs(sum-1) > 1e-12 {
		t.Errorf("endpoints %+v", tr.Endpoints)
	}
	if len(tr.Notes) != 0 {
		t.Errorf("notes: %q", tr.Notes)
	}
}

// TestNodePortUnknownSourcePort: without a source port nothing kube-proxy writes depends on it.
func TestNodePortUnknownSourcePort(t *testing.T) {
	_, walk := t2Worker(t)
	tr := walk("172.18.0.1", "172.18.0.3:30696", netfilter.Origin{Iif: "eth0"})
	if len(tr.Paths) != 3 || tr.Verdict != trace.Delivered || len(tr.Notes) != 0 {
		t.Errorf("%s", dump(tr))
	}
}

// TestClusterIPFromPod: a pod's connection to a ClusterIP keeps its source, except when it reaches the pod
// itself (hairpin): @hairpin-connections masquerades it to the bridge address.
func TestClusterIPFromPod(t *testing.T) {
	_, walk := t2Worker(t)
	tr := walk("10.244.1.2:40000", "10.96.227.102:80", netfilter.Origin{Iif: "cni0"})
	if len(tr.Paths) != 3 {
		t.Fatalf("%d paths:\n%s", len(tr.Paths), dump(tr))
	}
	for _, p := range tr.Paths {
		wantReason(t, p, "services", 1, "ip saddr 10.244.1.2 is in 10.244.0.0/16")
		wantReason(t, p, "masquerading", 1, "meta mark & 0x00004000 is 0x00000000 (meta mark is 0x00000000)")
		if p.Probability != 1.0/3 {
			t.Errorf("probability %v", p.Probability)
		}
	}
	self := pathTo(t, tr, "10.244.1.2:80")
	if self.SNAT != "10.244.1.1" {
		t.Errorf("hairpin: the pod sees %s, want 10.244.1.1", self.SNAT)
	}
	if h := hopOf(self, "masquerading", 2); h == nil || !h.Matched || h.Verdict != "masquerade to 10.244.1.1" {
		t.Errorf("hairpin hop %+v", h)
	}
	for _, ep := range []string{"10.244.1.3:80", "10.244.2.2:80"} {
		p := pathTo(t, tr, ep)
		if p.SNAT != "10.244.1.2" {
			t.Errorf("%s: the pod sees %s, want the client pod's 10.244.1.2", ep, p.SNAT)
		}
		wantReason(t, p, "masquerading", 2, "10.244.1.2 . "+strings.TrimSuffix(ep, ":80")+" . tcp . 80 is not in set @hairpin-connections")
	}
}

// TestNodePortLocalhostFromNode: nftables mode never serves NodePorts on 127.0.0.1.
func TestNodePortLocalhostFromNode(t *testing.T) {
	_, walk := t2Worker(t)
	tr := walk("127.0.0.1", "127.0.0.1:30696", netfilter.Origin{FromNode: true})
	if len(tr.Paths) != 1 || tr.Verdict != trace.Local || tr.Paths[0].Endpoint != nil {
		t.Fatalf("%s", dump(tr))
	}
	p := tr.Paths[0]
	wantReason(t, p, "services", 3, "ip daddr 127.0.0.1 is in 127.0.0.0/8")
	wantReason(t, p, "nodeport-endpoints-check", 1, "ip daddr 127.0.0.1 is in 127.0.0.0/8")
	wantReason(t, p, "masquerading", 2, "ct status has no dnat: nothing translated this flow")
	if h := hopOf(p, "services", 3); h == nil || h.Hook != "OUTPUT" {
		t.Errorf("services rule 3 should be evaluated in OUTPUT: %+v", h)
	}
}

// TestNodePortOtherNodeAddress: a NodePort on an address that is not the node's is not a NodePort.
func TestNodePortOtherNodeAddress(t *testing.T) {
	_, walk := t2Worker(t)
	tr := walk("172.18.0.1", "172.18.0.9:30696", netfilter.Origin{Iif: "eth0"})
	wantReason(t, tr.Paths[0], "services", 3, "fib daddr type of 172.18.0.9 is unicast, not local")
	if tr.Verdict != trace.Delivered || tr.Paths[0].Endpoint != nil {
		t.Errorf("%s", dump(tr))
	}
}

// TestPortWithoutService: a node port no Service uses goes to the node's own sockets, untranslated.
func TestPortWithoutService(t *testing.T) {
	_, walk := t2Worker(t)
	tr := walk("172.18.0.1", "172.18.0.3:31000", netfilter.Origin{Iif: "eth0"})
	if tr.Verdict != trace.Local || len(tr.Paths) != 1 {
		t.Fatalf("%s", dump(tr))
	}
	p := tr.Paths[0]
	wantReason(t, p, "services", 3, "tcp . 31000 is not in map @service-nodeports")
	wantReason(t, p, "nodeport-endpoints-check", 1, "tcp . 31000 is not in map @no-endpoint-nodeports")
	if h := hopOf(p, "nat-prerouting", 0); h == nil || h.Verdict != "policy accept" {
		t.Errorf("nat-prerouting policy hop %+v", h)
	}
}

// TestClusterIPWrongPort: a ClusterIP port no Service has is rejected by cluster-ips-check.
func TestClusterIPWrongPort(t *testing.T) {
	_, walk := t2Worker(t)
	tr := walk("10.244.1.2", "10.96.227.102:81", netfilter.Origin{Iif: "cni0"})
	if tr.Verdict != trace.Rejected || tr.Paths[0].VerdictBy == nil || tr.Paths[0].VerdictBy.Chain != "cluster-ips-check" {
		t.Fatalf("%s", dump(tr))
	}
	if vb := tr.Paths[0].VerdictBy; vb.Rule != 1 || vb.Hook != "FORWARD" || vb.Verdict != "reject" {
		t.Errorf("verdictBy %+v", vb)
	}
}

// nfh1 captures: node nfh1-worker (172.18.0.3) with Services default/web (31611), default/empty (no
// endpoints, 30080), default/sticky (ClientIP affinity, 30081), default/local (externalTrafficPolicy Local,
// 30082); endpoints 10.244.1.2 and 10.244.1.3 on nfh1-worker, 10.244.2.2 on nfh1-worker2.
func nfh1(t *testing.T, ruleset, node string) func(src, dst string, o netfilter.Origin) *trace.Trace {
	rs := loadFixture(t, ruleset, true)
	rs.Leave(nil)
	st := nodeState(t, node)
	return func(src, dst string, o netfilter.Origin) *trace.Trace { return walkFlow(t, rs, st, src, dst, "tcp", o) }
}

// TestServiceWithoutEndpoints: NodePort and ClusterIP of a Service without endpoints are rejected by
// reject-chain, through the no-endpoint maps; the hop names the Service from the map element's comment.
func TestServiceWithoutEndpoints(t *testing.T) {
	walk := nfh1(t, "nfh1-worker", "nfh1-worker")
	tr := walk("172.18.0.1:40003", "172.18.0.3:30080", netfilter.Origin{Iif: "eth0"})
	if tr.Verdict != trace.Rejected || len(tr.Paths) != 1 {
		t.Fatalf("%s", dump(tr))
	}
	p := tr.Paths[0]
	if vb := p.VerdictBy; vb == nil || vb.Chain != "reject-chain" || vb.Rule != 1 || vb.Hook != "INPUT" {
		t.Errorf("verdictBy %+v", p.VerdictBy)
	}
	if h := hopOf(p, "nodeport-endpoints-check", 1); h == nil || !h.Matched || h.Verdict != "goto reject-chain" || h.Service != "default/empty:http" {
		t.Errorf("no-endpoint hop %+v", h)
	}
	if tr.Service != "default/empty:http" {
		t.Errorf("service %q", tr.Service)
	}
	tr = walk("10.244.1.2", "10.96.16.139:80", netfilter.Origin{Iif: "cni0"})
	if tr.Verdict != trace.Rejected || tr.Paths[0].VerdictBy == nil || tr.Paths[0].VerdictBy.Hook != "FORWARD" {
		t.Fatalf("%s", dump(tr))
	}
	if h := hopOf(tr.Paths[0], "service-endpoints-check", 1); h == nil || h.Service != "default/empty:http" {
		t.Errorf("no-endpoint hop %+v", h)
	}
}

// TestServiceWithoutEndpointsEdited: the same on the t2 capture, with an element added to the JSON by hand.
func TestServiceWithoutEndpointsEdited(t *testing.T) {
	b, err := os.ReadFile("testdata/nftables-worker.json")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), `"name": "no-endpoint-services", "table": "kube-proxy", "type": ["ipv4_addr", "inet_proto", "inet_service"], "handle": 40, "comment": "vmap to drop or reject packets to services with no endpoints", "map": "verdict"`,
		`"name": "no-endpoint-services", "table": "kube-proxy", "type": ["ipv4_addr", "inet_proto", "inet_service"], "handle": 40, "comment": "vmap to drop or reject packets to services with no endpoints", "map": "verdict", "elem": [[{"elem": {"val": {"concat": ["10.96.0.77", "tcp", 80]}, "comment": "default/gone:http"}}, {"goto": {"target": "reject-chain"}}]]`, 1)
	if s == string(b) {
		t.Fatal("fixture changed: no-endpoint-services not found")
	}
	s = strings.Replace(s, `"elem": ["10.96.227.102"]`, `"elem": ["10.96.227.102", "10.96.0.77"]`, 1)
	rs, err := ParseRuleset([]byte(s), "")
	if err != nil {
		t.Fatal(err)
	}
	// Without the text listing, rule texts are rendered from the JSON.
	checkRejectsGone(t, rs)
}

// checkRejectsGone walks a pod's packet to 10.96.0.77:80 (default/gone, no endpoints, added to the capture by the
// caller): it must meet reject-chain's `reject` and be rejected.
func checkRejectsGone(t *testing.T, rs *Ruleset) {
	t.Helper()
	tr := walkFlow(t, rs, nodeState(t, "nftables-worker"), "10.244.1.2", "10.96.0.77:80", "tcp", netfilter.Origin{Iif: "cni0"})
	if tr.Verdict != trace.Rejected || tr.Service != "default/gone:http" {
		t.Fatalf("%s", dump(tr))
	}
	if h := hopOf(tr.Paths[0], "reject-chain", 1); h == nil || h.Text != "reject" {
		t.Errorf("reject hop %+v", h)
	}
}

// TestExternalTrafficPolicyLocal: from outside, only this node's endpoints (1/2 each), source kept; from a
// pod, the short-circuit to all endpoints; on a node without local endpoints, dropped.
func TestExternalTrafficPolicyLocal(t *testing.T) {
	walk := nfh1(t, "nfh1-worker", "nfh1-worker")
	tr := walk("172.18.0.1:40004", "172.18.0.3:30082", netfilter.Origin{Iif: "eth0"})
	if len(tr.Paths) != 2 || tr.SNAT != "172.18.0.1" || tr.Service != "default/local:http" {
		t.Fatalf("%s", dump(tr))
	}
	for _, ep := range []string{"10.244.1.2:80", "10.244.1.3:80"} {
		p := pathTo(t, tr, ep)
		if p.Probability != 0.5 {
			t.Errorf("%s: probability %v", ep, p.Probability)
		}
		wantReason(t, p, "external-4Z6N3DUC-default/local/tcp/http", 1, "ip saddr 172.18.0.1 is not in 10.244.0.0/16")
		wantReason(t, p, "external-4Z6N3DUC-default/local/tcp/http", 2, "fib saddr type of 172.18.0.1 is unicast, not local")
	}
	tr = walk("10.244.1.2", "172.18.0.3:30082", netfilter.Origin{Iif: "cni0"})
	if len(tr.Paths) != 3 {
		t.Errorf("from a pod: %s", dump(tr))
	}
	// From the node itself: masqueraded, and sent to every endpoint.
	tr = walk("172.18.0.3", "172.18.0.3:30082", netfilter.Origin{FromNode: true})
	if len(tr.Paths) != 3 || tr.Verdict != trace.Delivered {
		t.Fatalf("from the node: %s", dump(tr))
	}
	if p := pathTo(t, tr, "10.244.2.2:80"); p.SNAT != "172.18.0.3" {
		t.Errorf("from the node to 10.244.2.2: snat %s", p.SNAT)
	}

	walk = nfh1(t, "nfh1-control-plane", "nfh1-control-plane")
	tr = walk("172.18.0.1", "172.18.0.2:30082", netfilter.Origin{Iif: "eth0"})
	if tr.Verdict != trace.Dropped || tr.Paths[0].VerdictBy == nil || tr.Paths[0].VerdictBy.Chain != "nodeport-endpoints-check" {
		t.Fatalf("%s", dump(tr))
	}
}

// TestSessionAffinity: a new client is spread by numgen over the endpoint chains (each remembers it in its
// affinity set); a remembered client goes to its endpoint with certainty.
func TestSessionAffinity(t *testing.T) {
	walk := nfh1(t, "nfh1-worker", "nfh1-worker")
	tr := walk("172.18.0.1", "172.18.0.3:30081", netfilter.Origin{Iif: "eth0"})
	if len(tr.Paths) != 3 || tr.Service != "default/sticky:http" {
		t.Fatalf("%s", dump(tr))
	}
	p := pathTo(t, tr, "10.244.1.3:80")
	wantReason(t, p, "service-H6U4RGLG-default/sticky/tcp/http", 1, "ip saddr 172.18.0.1 is not in set @affinity-6VAY5H5W-default/sticky/tcp/http__10.244.1.2/80")
	h := hopOf(p, "service-H6U4RGLG-default/sticky/tcp/http", 4)
	if h == nil || h.Probability != 1.0/3 || h.Verdict != "goto endpoint-JW3I6AVB-default/sticky/tcp/http__10.244.1.3/80" || h.Reason != "numgen random mod 3 gave 1 (chance 1/3)" {
		t.Errorf("numgen hop %+v", h)
	}
	h = hopOf(p, "endpoint-JW3I6AVB-default/sticky/tcp/http__10.244.1.3/80", 1)
	if h == nil || len(h.Changes) != 1 || h.Changes[0] != "update @affinity-JW3I6AVB-default/sticky/tcp/http__10.244.1.3/80 with 172.18.0.1" || h.Service != "default/sticky:http" {
		t.Errorf("affinity update hop %+v", h)
	}

	walk = nfh1(t, "nfh1-worker-after-sticky", "nfh1-worker")
	tr = walk("172.18.0.1", "172.18.0.3:30081", netfilter.Origin{Iif: "eth0"})
	if len(tr.Paths) != 1 || tr.Paths[0].Probability != 1 || tr.Endpoints[0].Addr() != "10.244.1.2:80" {
		t.Fatalf("%s", dump(tr))
	}
	// Another client is not remembered.
	tr = walk("172.18.0.7", "172.18.0.3:30081", netfilter.Origin{Iif: "eth0"})
	if len(tr.Paths) != 3 {
		t.Errorf("%s", dump(tr))
	}
}

// TestSkip: the tracing table and the iptables-nft tables are left to others; only ip and inet tables walk.
func TestSkip(t *testing.T) {
	rs := loadFixture(t, "nfh1-worker", true)
	names := func() map[string]bool {
		m := map[string]bool{}
		for _, c := range rs.BaseChains() {
			m[c.Table+" "+c.Name] = true
		}
		return m
	}
	if !names()["ip k8sguide-trace pre"] {
		t.Errorf("without a skip set the tracing table walks: %v", names())
	}
	rs.Leave(xtablesCovered())
	got := names()
	if got["ip k8sguide-trace pre"] || !got["ip kube-proxy nat-prerouting"] || len(got) != 8 {
		t.Errorf("with the skip set: %v", got)
	}
	for _, c := range rs.BaseChains() {
		if c.Name == "nat-postrouting" && (!c.NAT || c.Priority != 100 || c.Hook != netfilter.Postrouting || c.Table != "ip kube-proxy") {
			t.Errorf("%+v", c)
		}
		if c.Name == "filter-prerouting-pre-dnat" && (c.NAT || c.Priority != -110 || c.Hook != netfilter.Prerouting) {
			t.Errorf("%+v", c)
		}
	}
	rs.Skip = map[string]bool{"ip kube-proxy": true, "k8sguide-trace": true}
	if n := len(rs.BaseChains()); n != 0 {
		t.Errorf("skip by family and name: %d base chains left", n)
	}
	// The scratch capture has an inet table (walked) besides its ip table.
	rs = loadFixture(t, "scratch", true)
	inet := false
	for _, c := range rs.BaseChains() {
		inet = inet || c.Table == "inet x"
	}
	if !inet {
		t.Error("inet table not walked")
	}
}

func TestServiceFromChain(t *testing.T) {
	for name, want := range map[string]string{
		"service-PFISGYVC-default/web/tcp/":                        "default/web",
		"external-H6U4RGLG-default/sticky/tcp/http":                "default/sticky:http",
		"local-4Z6N3DUC-default/local/tcp/http":                    "default/local:http",
		"endpoint-JW3I6AVB-default/sticky/tcp/http__10.244.1.3/80": "default/sticky:http",
		"affinity-6VAY5H5W-default/sticky/tcp/http__10.244.1.2/80": "default/sticky:http",
		"firewall-ABCDEFGH-ns/lb/udp/dns":                          "ns/lb:dns",
		"services":                                                 "",
		"service-endpoints-check":                                  "",
		"service-lower-default/web/tcp/":                           "",
		"service-PFISGYVC-default/web":                             "",
	} {
		if got := ServiceFromChain(name); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
}

// TestConcurrentWalks: a parsed Ruleset is read-only during walks and may be shared (run with -race).
func TestConcurrentWalks(t *testing.T) {
	rs := loadFixture(t, "nfh1-worker", true)
	rs.Leave(nil)
	st := nodeState(t, "nfh1-worker")
	done := make(chan int)
	for i := 0; i < 4; i++ {
		go func() {
			pkt := trace.Packet{Src: "172.18.0.1", Dst: "172.18.0.3:30081", Proto: "tcp"}
			flow, _ := pkt.ParseFlow()
			paths, _, _ := netfilter.Run([]netfilter.Ruleset{rs}, st, flow, netfilter.Origin{Iif: "eth0"}, nil)
			done <- len(paths)
		}()
	}
	for i := 0; i < 4; i++ {
		if n := <-done; n != 3 {
			t.Errorf("%d paths", n)
		}
	}
}
