package nftables

import (
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
	"github.com/k8sguide/k8sguide/dataplanes/netstate"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// kernelHop is one line of `nft monitor trace` for a rule that matched or a chain's policy.
type kernelHop struct {
	Chain, Text, Verdict string
}

// kernelPacket is what `nft monitor trace` showed for one packet (all trace ids that carried its IP id: a
// packet the node sends to itself loops back through lo under a new trace id).
type kernelPacket struct {
	Hops []kernelHop
	// Dst is the destination of the last packet line of the table, after any DNAT.
	Dst netip.AddrPort
}

// kernelPackets reads a `nft monitor trace` capture and returns, for each packet in order, the rules of
// table ("ip kube-proxy") it matched.
func kernelPackets(t testing.TB, file, table string) []kernelPacket {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	ipid := map[string]string{} // trace id -> IP id of the packet it carries now
	index := map[string]int{}   // IP id -> packet index
	var out []kernelPacket
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 7 || f[0] != "trace" || f[1] != "id" {
			continue
		}
		id, tbl, chain := f[2], f[3]+" "+f[4], f[5]
		rest := strings.Join(f[6:], " ")
		if strings.HasPrefix(rest, "packet: ") {
			p := fieldAfter(f, "ip", "id")
			ipid[id] = p
			if _, ok := index[p]; !ok {
				index[p] = len(out)
				out = append(out, kernelPacket{})
			}
			if tbl == table {
				d, _ := netip.ParseAddr(fieldAfter(f, "ip", "daddr"))
				port := fieldAfter(f, "tcp", "dport")
				if ap, err := netip.ParseAddrPort(d.String() + ":" + port); err == nil {
					out[index[p]].Dst = ap
				}
			}
			continue
		}
		if tbl != table {
			continue
		}
		i, ok := index[ipid[id]]
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(rest, "rule "):
			text := strings.TrimPrefix(rest, "rule ")
			v := ""
			if j := strings.LastIndex(text, " (verdict "); j >= 0 {
				v = strings.TrimSuffix(text[j+len(" (verdict "):], ")")
				text = text[:j]
			}
			out[i].Hops = append(out[i].Hops, kernelHop{chain, text, v})
		case strings.HasPrefix(rest, "policy "):
			out[i].Hops = append(out[i].Hops, kernelHop{chain, "policy " + f[7], "policy " + f[7]})
		}
	}
	return out
}

// fieldAfter returns the word after the words a b in f ("" when absent).
func fieldAfter(f []string, a, b string) string {
	for i := 0; i+2 < len(f); i++ {
		if f[i] == a && f[i+1] == b {
			return f[i+2]
		}
	}
	return ""
}

// walkedKernelHops turns a walked path into what nft monitor trace would print for it: the matched rules and
// policies of table, with nat statements showing as accept and reject as drop (as the kernel reports them).
func walkedKernelHops(p trace.Path, table string) []kernelHop {
	var out []kernelHop
	for _, h := range p.Hops {
		if !h.Matched || h.Table != table {
			continue
		}
		v := h.Verdict
		for _, nat := range []string{"dnat ", "snat ", "masquerade ", "redirect "} {
			if strings.HasPrefix(v, nat) {
				v = "accept"
			}
		}
		if v == "reject" {
			v = "drop"
		}
		out = append(out, kernelHop{h.Chain, h.Text, v})
	}
	return out
}

type kernelCase struct {
	name     string
	monitor  string // testdata file
	ruleset  string // testdata fixture (JSON + text)
	node     string // testdata addr/routes fixture
	src, dst string
	origin   netfilter.Origin
	packet   int    // which traced packet (0: the first, a new flow)
	ct       string // conntrack line making the flow established (packet > 0)
	verdict  string // the trace's verdict for the path the kernel took
	// conntrack is the testdata file with the kernel's entry for the flow: the SNAT it shows must be ours.
	conntrack string
}

var kernelCases = []kernelCase{
	{name: "nodeport from client (t2 capture)", monitor: "nftables-worker.monitor", ruleset: "nftables-worker", node: "nftables-worker",
		src: "172.18.0.1:40002", dst: "172.18.0.3:30696", origin: netfilter.Origin{Iif: "eth0"}, verdict: trace.Delivered},
	{name: "nodeport, established packet (t2 capture)", monitor: "nftables-worker.monitor", ruleset: "nftables-worker", node: "nftables-worker",
		src: "172.18.0.1:40002", dst: "172.18.0.3:30696", origin: netfilter.Origin{Iif: "eth0"}, packet: 1,
		ct:      "tcp      6 431999 ESTABLISHED src=172.18.0.1 dst=172.18.0.3 sport=40002 dport=30696 src=10.244.1.3 dst=10.244.1.1 sport=80 dport=40002 [ASSURED] mark=0 use=1",
		verdict: trace.Delivered},
	{name: "session affinity, first connection", monitor: "nfh1-sticky-first.monitor", ruleset: "nfh1-worker", node: "nfh1-worker",
		src: "172.18.0.1:40001", dst: "172.18.0.3:30081", origin: netfilter.Origin{Iif: "eth0"}, verdict: trace.Delivered, conntrack: "nfh1-sticky-first.conntrack"},
	{name: "session affinity, client remembered", monitor: "nfh1-sticky-again.monitor", ruleset: "nfh1-worker-after-sticky", node: "nfh1-worker",
		src: "172.18.0.1:40002", dst: "172.18.0.3:30081", origin: netfilter.Origin{Iif: "eth0"}, verdict: trace.Delivered, conntrack: "nfh1-sticky-again.conntrack"},
	{name: "service without endpoints", monitor: "nfh1-empty.monitor", ruleset: "nfh1-worker", node: "nfh1-worker",
		src: "172.18.0.1:40003", dst: "172.18.0.3:30080", origin: netfilter.Origin{Iif: "eth0"}, verdict: trace.Rejected},
	{name: "externalTrafficPolicy Local", monitor: "nfh1-local.monitor", ruleset: "nfh1-worker", node: "nfh1-worker",
		src: "172.18.0.1:40004", dst: "172.18.0.3:30082", origin: netfilter.Origin{Iif: "eth0"}, verdict: trace.Delivered, conntrack: "nfh1-local.conntrack"},
	{name: "externalTrafficPolicy Local, established packet", monitor: "nfh1-local.monitor", ruleset: "nfh1-worker", node: "nfh1-worker",
		src: "172.18.0.1:40004", dst: "172.18.0.3:30082", origin: netfilter.Origin{Iif: "eth0"}, packet: 1,
		ct:      "tcp      6 431999 ESTABLISHED src=172.18.0.1 dst=172.18.0.3 sport=40004 dport=30082 src=10.244.1.3 dst=172.18.0.1 sport=80 dport=40004 [ASSURED] mark=0 use=1",
		verdict: trace.Delivered},
	{name: "externalTrafficPolicy Local, node without endpoints", monitor: "nfh1-local-no-endpoints.monitor", ruleset: "nfh1-control-plane", node: "nfh1-control-plane",
		src: "172.18.0.1:40008", dst: "172.18.0.2:30082", origin: netfilter.Origin{Iif: "eth0"}, verdict: trace.Dropped},
	{name: "clusterIP from a pod", monitor: "nfh1-pod-clusterip.monitor", ruleset: "nfh1-worker", node: "nfh1-worker",
		src: "10.244.1.2:40005", dst: "10.96.147.98:80", origin: netfilter.Origin{Iif: "cni0"}, verdict: trace.Delivered, conntrack: "nfh1-pod-clusterip.conntrack"},
	{name: "clusterIP from a pod, hairpin to itself", monitor: "nfh1-hairpin.monitor", ruleset: "nfh1-worker", node: "nfh1-worker",
		src: "10.244.1.2:40015", dst: "10.96.147.98:80", origin: netfilter.Origin{Iif: "cni0"}, verdict: trace.Delivered, conntrack: "nfh1-hairpin.conntrack"},
	{name: "nodeport from the node itself", monitor: "nfh1-node-nodeport.monitor", ruleset: "nfh1-worker", node: "nfh1-worker",
		src: "172.18.0.3:40006", dst: "172.18.0.3:31611", origin: netfilter.Origin{FromNode: true}, verdict: trace.Delivered, conntrack: "nfh1-node-nodeport.conntrack"},
	{name: "clusterIP from the node itself", monitor: "nfh1-node-clusterip.monitor", ruleset: "nfh1-worker", node: "nfh1-worker",
		src: "172.18.0.3:40020", dst: "10.96.147.98:80", origin: netfilter.Origin{FromNode: true}, verdict: trace.Delivered, conntrack: "nfh1-node-clusterip.conntrack"},
	{name: "externalTrafficPolicy Local nodeport from the node itself", monitor: "nfh1-node-local-nodeport.monitor", ruleset: "nfh1-worker", node: "nfh1-worker",
		src: "172.18.0.3:40021", dst: "172.18.0.3:30082", origin: netfilter.Origin{FromNode: true}, verdict: trace.Delivered, conntrack: "nfh1-node-local-nodeport.conntrack"},
	{name: "nodeport on 127.0.0.1 from the node", monitor: "nfh1-node-localhost.monitor", ruleset: "nfh1-worker", node: "nfh1-worker",
		src: "127.0.0.1:40009", dst: "127.0.0.1:31611", origin: netfilter.Origin{FromNode: true}, verdict: trace.Local},
	{name: "port without a service", monitor: "nfh1-no-service.monitor", ruleset: "nfh1-worker", node: "nfh1-worker",
		src: "172.18.0.1:40007", dst: "172.18.0.3:31999", origin: netfilter.Origin{Iif: "eth0"}, verdict: trace.Local},
}

// TestKernelTraceAgreement walks the flows of real connections and checks, for the path whose endpoint is the
// one the kernel picked, that the rules the walk says matched (and the policies it applied) are exactly,
// in order, the ones `nft monitor trace` showed; and that the source address the endpoint saw (conntrack's
// reply tuple) is the walk's SNAT.
func TestKernelTraceAgreement(t *testing.T) {
	for _, c := range kernelCases {
		t.Run(c.name, func(t *testing.T) {
			rs := loadFixture(t, c.ruleset, true)
			rs.Leave(nil)
			st := nodeState(t, c.node)
			if c.ct != "" {
				st.Conntrack = []string{c.ct}
			}
			packets := kernelPackets(t, "testdata/"+c.monitor, "ip kube-proxy")
			if len(packets) <= c.packet {
				t.Fatalf("%s: %d packets traced", c.monitor, len(packets))
			}
			kp := packets[c.packet]
			tr := walkFlow(t, rs, st, c.src, c.dst, "tcp", c.origin)
			orig := netip.MustParseAddrPort(c.dst)
			var path *trace.Path
			for i, p := range tr.Paths {
				if kp.Dst != orig && p.Endpoint != nil && p.Endpoint.Addr() == kp.Dst.String() ||
					kp.Dst == orig && p.Endpoint == nil {
					if path != nil {
						t.Fatalf("two paths for the kernel's destination %s:\n%s", kp.Dst, dump(tr))
					}
					path = &tr.Paths[i]
				}
			}
			if path == nil {
				t.Fatalf("no path reaches the kernel's destination %s:\n%s", kp.Dst, dump(tr))
			}
			got := walkedKernelHops(*path, "ip kube-proxy")
			if len(got) != len(kp.Hops) {
				t.Errorf("walk matched %d rules, kernel %d", len(got), len(kp.Hops))
			}
			for i := 0; i < max(len(got), len(kp.Hops)); i++ {
				var g, k kernelHop
				if i < len(got) {
					g = got[i]
				}
				if i < len(kp.Hops) {
					k = kp.Hops[i]
				}
				if g != k {
					t.Errorf("hop %d:\n walk   %+v\n kernel %+v", i, g, k)
				}
			}
			if path.Verdict != c.verdict {
				t.Errorf("verdict %s, want %s", path.Verdict, c.verdict)
			}
			if c.conntrack != "" {
				b, err := os.ReadFile("testdata/" + c.conntrack)
				if err != nil {
					t.Fatal(err)
				}
				e, ok := netstate.ParseConntrack(strings.TrimSpace(string(b)))
				if !ok {
					t.Fatalf("%s: not a conntrack entry", c.conntrack)
				}
				if path.SNAT != e.Reply.Dst.String() {
					t.Errorf("the endpoint sees source %s, the walk says %s", e.Reply.Dst, path.SNAT)
				}
				if path.Endpoint == nil || path.Endpoint.Addr() != netip.AddrPortFrom(e.Reply.Src, e.Reply.Sport).String() {
					t.Errorf("conntrack's endpoint is %s:%d, the walk's %+v", e.Reply.Src, e.Reply.Sport, path.Endpoint)
				}
			}
			if t.Failed() {
				t.Log(dump(tr))
			}
			t.Logf("%d kernel hops agree (destination %s, %d paths)", len(kp.Hops), kp.Dst, len(tr.Paths))
		})
	}
}
