package tracer

import (
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/snapshot"
	"github.com/k8sguide/k8sguide/inspect/stages"
)

// readingCase is one packet through a dump of testdata/readings (see its README for where each came from):
// the verdict a reasonable reading of the input gives, and what the trace must say it assumed or lacks.
type readingCase struct {
	name   string
	file   string // under testdata/readings, or a path from this package
	before string // text put before the file's, as a user pastes it
	req    Request
	local  []string
	want   string
	// endpoint is the one endpoint every delivering path reaches ("" for none); snat, the source every
	// delivering path's endpoint sees ("" for no check).
	endpoint, snat string
	// note and missing are words the trace's notes or Missing must hold ("" for none); noMissing says
	// Missing must be empty.
	note, missing string
}

func runReadings(t *testing.T, cases []readingCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.file
			if !strings.Contains(path, "/") {
				path = "testdata/readings/" + path
			}
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var local []netip.Addr
			for _, a := range tc.local {
				local = append(local, netip.MustParseAddr(a))
			}
			s, err := Load(append([]byte(tc.before), raw...), local)
			if err != nil {
				t.Fatal(err)
			}
			tr, err := Trace(s, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			notes, missing := strings.Join(tr.Notes, "\n"), strings.Join(tr.Missing, "\n")
			if tr.Verdict != tc.want {
				t.Fatalf("verdict %s, want %s\nmissing:\n%s\nnotes:\n%s", tr.Verdict, tc.want, missing, notes)
			}
			if tc.endpoint != "" && (len(tr.Endpoints) != 1 || tr.Endpoints[0].Addr() != tc.endpoint) {
				t.Errorf("endpoints %+v, want only %s", tr.Endpoints, tc.endpoint)
			}
			for _, p := range tr.Paths {
				if tc.snat != "" && p.Verdict == trace.Delivered && p.SNAT != tc.snat {
					t.Errorf("a path's endpoint sees %q, want %q", p.SNAT, tc.snat)
				}
			}
			if !strings.Contains(notes, tc.note) {
				t.Errorf("notes lack %q:\n%s", tc.note, notes)
			}
			if !strings.Contains(missing, tc.missing) || tc.missing == "" && missing != "" {
				t.Errorf("missing %q, want a mention of %q", missing, tc.missing)
			}
		})
	}
}

// TestReadingsOfPastes (issue 35): what people paste is read, and answered where a reasonable reading of it
// answers, with the assumption said; unknown only where no reading does, naming what is missing.
func TestReadingsOfPastes(t *testing.T) {
	node := []string{"192.168.1.10"}
	seed := "../../dataplanes/iptables/testdata/seed001-nodeport.save"
	runReadings(t, []readingCase{
		// `#` lines are notes or the tool's own comments, not root prompts, unless a command follows.
		{name: "nft's iptables-nft warning on top", file: "iptables-nft-warning.nft",
			req: Request{Dst: "10.96.0.10:80"}, want: trace.Delivered, endpoint: "10.244.1.5:80"},
		{name: "a note on top of seed 001's rules", file: seed, before: "# rules from node1, after the upgrade\n",
			req: Request{Dst: "10.98.128.179:80"}, want: trace.Delivered},
		{name: "a note that reads like a root prompt", file: seed, before: "# cat rules.txt\n",
			req: Request{Dst: "10.98.128.179:80"}, want: trace.Delivered},
		// A NodePort whose endpoint is a hostNetwork pod on the node itself: the DNAT keeps the address and
		// changes the port.
		{name: "iptables-nft nat listed by nft: NodePort to a hostNetwork endpoint", file: "hostnet-nodeport.nft", local: []string{"172.18.0.3"},
			req: Request{Dst: "172.18.0.3:31103"}, want: trace.Delivered, endpoint: "172.18.0.3:8096", note: "is an address of this node"},
		{name: "the same rules from iptables-save", file: "hostnet-nodeport.save", local: []string{"172.18.0.3"},
			req: Request{Dst: "172.18.0.3:31103"}, want: trace.Delivered, endpoint: "172.18.0.3:8096"},
		// The filter table alone: a port of the node outside the NodePort range is answered, saying the nat
		// table was assumed to leave it alone; a NodePort is not; without the node's address, that is named.
		{name: "iptables -nvL: tcp 80 to the node", file: "filter-nvL.txt", local: node,
			req: Request{Dst: "192.168.1.10:80"}, want: trace.Local, note: "assumed: the nat table (not in the input) leaves 192.168.1.10:80 alone"},
		{name: "iptables -nvL: tcp 8080 to the node", file: "filter-nvL.txt", local: node,
			req: Request{Dst: "192.168.1.10:8080"}, want: trace.Dropped, note: "assumed: the nat table"},
		{name: "iptables -nvL: https from 10/8 only", file: "filter-nvL.txt", local: node,
			req: Request{Dst: "192.168.1.10:443", Src: "10.1.1.1"}, want: trace.Local},
		{name: "iptables -nvL: a NodePort", file: "filter-nvL.txt", local: node,
			req: Request{Dst: "192.168.1.10:31000"}, want: trace.Unknown, missing: "the nat table"},
		{name: "iptables -nvL: whose address is not said", file: "filter-nvL.txt",
			req: Request{Dst: "192.168.1.10:80"}, want: trace.Unknown, missing: "whether 192.168.1.10 is one of this node's addresses"},
		// Without -n: names (http, anywhere, any, loopback) are read.
		{name: "iptables -vL: dpt:http", file: "filter-vL.txt", local: node,
			req: Request{Dst: "192.168.1.10:80"}, want: trace.Local, note: "assumed: the nat table"},
		{name: "iptables -vL: 8080", file: "filter-vL.txt", local: node,
			req: Request{Dst: "192.168.1.10:8080"}, want: trace.Dropped},
		// Without -v the interfaces are not shown: "ACCEPT all -- anywhere anywhere" is `-i lo -j ACCEPT`.
		{name: "iptables -L hides -i lo", file: "filter-L.txt", local: node,
			req: Request{Dst: "192.168.1.10:8080"}, want: trace.Unknown, missing: "paste `iptables -L -v`"},
		// `! -o cbr0 -j MASQUERADE` with no routes in the input: where the packet goes is known, the source
		// the pod sees is not (it was decided as if the packet left by the assumed eth0); --out-iface tells.
		{name: "! -o cbr0 MASQUERADE, no routes", file: "masquerade-out-iface.save",
			req: Request{Dst: "10.0.0.144:80", Src: "10.244.1.9"}, want: trace.Delivered, snat: trace.Unknown, note: "nat/POSTROUTING rule 3 may masquerade it"},
		{name: "! -o cbr0 MASQUERADE, --out-iface cbr0", file: "masquerade-out-iface.save",
			req: Request{Dst: "10.0.0.144:80", Src: "10.244.1.9", OutIface: "cbr0"}, want: trace.Delivered, snat: "10.244.1.9"},
		{name: "! -o cbr0 MASQUERADE, --out-iface eth0", file: "masquerade-out-iface.save",
			req: Request{Dst: "10.0.0.144:80", Src: "10.244.1.9", OutIface: "eth0"}, want: trace.Delivered, snat: "eth0's address (not in the input: --local-addresses)"},
	})
}

// TestDockerHost (issue 35): a Docker host's rules (testdata/readings/README.md: captured from a real dockerd,
// with what the kernel did to each packet): a fact the dump lacks (the node's addresses, the interface a packet
// leaves by) never turns into a confident verdict; given, the answers are the kernel's.
func TestDockerHost(t *testing.T) {
	host := []string{"10.35.0.10", "172.17.0.1"}
	from := func(dst, out string) Request {
		return Request{Dst: dst, Src: "10.35.0.20", InIface: "eth0", OutIface: out}
	}
	var cases []readingCase
	for _, f := range []string{"docker20-iptables-save.txt", "docker20-nft.txt"} {
		cases = append(cases,
			readingCase{name: f + ": published port, whose address is not said", file: f,
				req: from("10.35.0.10:8080", "docker0"), want: trace.Unknown, missing: "--local-addresses tells"},
			readingCase{name: f + ": published port, where it leaves not said", file: f, local: host,
				req: from("10.35.0.10:8080", ""), want: trace.Unknown, missing: "--out-iface tells"},
			readingCase{name: f + ": published port", file: f, local: host,
				req: from("10.35.0.10:8080", "docker0"), want: trace.Delivered, endpoint: "172.17.0.2:80", snat: "10.35.0.20"},
			readingCase{name: f + ": routed to the published container", file: f, local: host,
				req: from("172.17.0.2:80", "docker0"), want: trace.Delivered},
			readingCase{name: f + ": routed to a container with nothing published", file: f, local: host,
				req: from("172.17.0.3:80", "docker0"), want: trace.Dropped},
			readingCase{name: f + ": a port nothing publishes", file: f, local: host,
				req: from("10.35.0.10:8081", ""), want: trace.Local},
		)
	}
	// nft -j shows iptables-nft's xt expressions without their arguments: what they do is named, not guessed.
	cases = append(cases, readingCase{name: "docker20-nft.json: xt addrtype", file: "docker20-nft.json", local: host,
		req: from("10.35.0.10:8080", "docker0"), want: trace.Unknown, missing: "use iptables-nft-save for these tables"})
	for _, f := range []string{"docker29-nftables.nft", "docker29-nftables.json"} {
		cases = append(cases,
			readingCase{name: f + ": published port, whose address is not said", file: f,
				req: from("10.35.0.10:8080", "docker0"), want: trace.Unknown, missing: "--local-addresses tells"},
			readingCase{name: f + ": published port", file: f, local: host,
				req: from("10.35.0.10:8080", "docker0"), want: trace.Delivered, endpoint: "172.17.0.2:80", snat: "10.35.0.20"},
			readingCase{name: f + ": routed to the published container", file: f, local: host,
				req: from("172.17.0.2:80", "docker0"), want: trace.Dropped},
			readingCase{name: f + ": a port nothing publishes", file: f, local: host,
				req: from("10.35.0.10:8081", ""), want: trace.Local},
		)
	}
	runReadings(t, cases)
}

// TestRedirect: REDIRECT sends the packet to the node itself (a sidecar's port): local, with the port --to-ports
// names; without the node's addresses the trace says which address it kept.
func TestRedirect(t *testing.T) {
	pod := []string{"10.244.1.5"}
	runReadings(t, []readingCase{
		{name: "inbound, redirected to 15006", file: "istio-sidecar.save", local: pod,
			req: Request{Dst: "10.244.1.5:8080"}, want: trace.Local},
		{name: "inbound, the pod's address not said", file: "istio-sidecar.save",
			req: Request{Dst: "10.244.1.5:8080"}, want: trace.Local, note: "assumed: REDIRECT (nat/ISTIO_IN_REDIRECT rule 1) sends the packet to the first address of eth0"},
		{name: "the sidecar's own port returns", file: "istio-sidecar.save", local: pod,
			req: Request{Dst: "10.244.1.5:15020"}, want: trace.Local},
	})
	s, err := Load([]byte(mustRead(t, "testdata/readings/istio-sidecar.save")), []netip.Addr{netip.MustParseAddr("10.244.1.5")})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := Trace(s, Request{Dst: "10.244.1.5:8080"})
	if err != nil {
		t.Fatal(err)
	}
	last := tr.Paths[0].Hops[len(tr.Paths[0].Hops)-1]
	if len(tr.Paths) != 1 || !strings.HasPrefix(last.Verdict, "redirect to 10.244.1.5:15006") {
		t.Errorf("paths %d, last hop %q: want redirect to 10.244.1.5:15006", len(tr.Paths), last.Verdict)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestUntranslatedForward (issue 35): a ClusterIP on a port its Service lacks, and an address the cluster does
// not own, leave the node untranslated; the trace says where they go and never that a pod answers. On the netns
// lab (iptables, kube-proxy v1.36.4) `trace --from node --dst CLUSTERIP:8080 --verify` agreed with a real
// connection that timed out; this is the same walk on the rules of iptables-worker.save.
func TestUntranslatedForward(t *testing.T) {
	raw, err := os.ReadFile("../../dataplanes/iptables/testdata/iptables-worker.save")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Load(raw, []netip.Addr{netip.MustParseAddr("172.18.0.3")})
	if err != nil {
		t.Fatal(err)
	}
	s.Kubernetes = &snapshot.Kubernetes{
		Nodes:    []snapshot.Node{{Name: "t1-worker", IP: "172.18.0.3"}},
		Pods:     []snapshot.Pod{{Namespace: "default", Name: "web-2", IP: "10.244.2.2", Node: "t1-worker2"}},
		Services: []snapshot.Service{{Namespace: "default", Name: "web", ClusterIP: "10.96.12.123", Ports: []snapshot.ServicePort{{Protocol: "TCP", Port: 80, NodePort: 31103}}}},
	}
	tr, err := Trace(s, Request{Dst: "10.96.12.123:8080", From: "node"})
	if err != nil {
		t.Fatal(err)
	}
	p := tr.Paths[0]
	if tr.Verdict != trace.Delivered || p.Endpoint != nil || p.Reply != nil || !strings.Contains(p.NoAnswer, "the ClusterIP of default/web, which has no tcp port 8080") {
		t.Fatalf("verdict %s, path %+v", tr.Verdict, p)
	}
	if why := trace.OutcomeMismatch(p, trace.Connection{Error: "i/o timeout"}); why != "" {
		t.Errorf("a timed-out connection disagrees: %s", why)
	}
	if why := trace.OutcomeMismatch(p, trace.Connection{Answered: true, Pod: "web-1"}); why == "" {
		t.Errorf("a pod's answer agrees with a path nothing answers")
	}
	// --explain says no pod sees it and nothing answers, never "the pod sees 172.18.0.3".
	for _, st := range stages.Of(tr) {
		if (st.Key == stages.Source || st.Key == stages.Reply) && !strings.Contains(st.Text, "no pod receives it, nothing answers") {
			t.Errorf("stage %s: %q", st.Key, st.Text)
		}
	}
	tr, err = Trace(s, Request{Dst: "10.123.4.5:80"})
	if err != nil {
		t.Fatal(err)
	}
	if p := tr.Paths[0]; p.NoAnswer != "" || p.Reply == nil || strings.Contains(p.Reply.Text, "pod") ||
		!strings.Contains(strings.Join(tr.Notes, "\n"), "no node, pod or Service of the cluster owns it") {
		t.Errorf("an address nobody in the cluster owns: path %+v, notes %q", p, tr.Notes)
	}
	// A pod's own address: the pod answers, untranslated (verify took the answer as "no predicted path").
	tr, err = Trace(s, Request{Dst: "10.244.2.2:80", From: "node"})
	if err != nil {
		t.Fatal(err)
	}
	if p := tr.Paths[0]; p.Endpoint == nil || p.Endpoint.Pod != "default/web-2" || !trace.AnsweredBy(p, trace.Connection{Answered: true, Pod: "web-2"}) {
		t.Errorf("a pod's own address: path %+v", p)
	}
}

// TestIPVSModeWithoutTable (issue 35): an IPVS-mode node's `iptables-save` and `ipset save` (the IPVS test VM's,
// dataplanes/ipvs/testdata), without `ipvsadm -Ln`. A port its ClusterIP does not serve is rejected by
// KUBE-IPVS-FILTER in filter INPUT, before IPVS (at LOCAL_IN) would see it: the missing table cannot change
// that, and the answer is the one the VM's whole snapshot gives. A served port stays unknown: IPVS picks.
func TestIPVSModeWithoutTable(t *testing.T) {
	var paste []byte
	for _, part := range []struct{ cmd, file string }{{"iptables-save", "vm-iptables-save.txt"}, {"ipset save", "vm-ipset-save.txt"}} {
		raw, err := os.ReadFile("../../dataplanes/ipvs/testdata/" + part.file)
		if err != nil {
			t.Fatal(err)
		}
		paste = append(append(paste, "$ "+part.cmd+"\n"...), raw...)
	}
	s, err := Load(paste, []netip.Addr{netip.MustParseAddr("172.18.0.2")})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dst, want string
	}{{"10.96.0.100:81", trace.Rejected}, {"10.96.0.100:80", trace.Unknown}} {
		tr, err := Trace(s, Request{Dst: tc.dst})
		if err != nil {
			t.Fatal(err)
		}
		if tr.Verdict != tc.want {
			t.Errorf("%s: %s, want %s (missing %q)", tc.dst, tr.Verdict, tc.want, tr.Missing)
		}
		if tc.want == trace.Rejected && (tr.Paths[0].VerdictBy == nil || tr.Paths[0].VerdictBy.Chain != "KUBE-IPVS-FILTER") {
			t.Errorf("%s: rejected by %+v", tc.dst, tr.Paths[0].VerdictBy)
		}
	}
}
