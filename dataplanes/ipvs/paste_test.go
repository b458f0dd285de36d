package ipvs_test

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/ipvs"
	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
	"github.com/k8sguide/k8sguide/dataplanes/netstate"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/snapshot"
	"github.com/k8sguide/k8sguide/inspect/tracer"
)

// The paste inputs in testdata/paste-* are the ipvsadm output parts of the tracer's corpus files (their prompts
// and fences left out, as the paste front end leaves them out): 05 `ipvsadm -ln` with `persistent 10800`, 08 a
// kube-proxy v1.20 node's `ipvsadm -Ln` with NodePorts on every node address, 10 `ipvsadm -ln` with SCTP, 11 an
// excerpt of `ipvsadm -L` (no -n) that starts mid-listing, with ports printed as service names.

// namedListing is `ipvsadm -L` as ipvsadm prints it on a node whose resolver names cluster addresses (CoreDNS
// reverse zones in /etc/resolv.conf, or /etc/hosts): host names where it has them, service names for ports,
// each cut at ipvsadm's widths (a virtual server's "PROTO  NAME" at 33 characters, a real server's name at 28).
const namedListing = `IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  kubernetes.default.svc.clust rr
  -> node1:6443                   Masq    1      0          0
TCP  apiserver:https rr
  -> 192.168.1.10:6443            Masq    1      0          0
TCP  node1:30080 rr
  -> 10-244-1-5.web.default.svc:h Masq    1      0          0
  -> 10.244.2.7:http-alt          Masq    1      0          0
TCP  localhost:30080 rr
  -> 10.244.1.5:http              Masq    1      0          0
TCP  10.96.0.10:domain rr
  -> 10.244.0.3:domain            Masq    1      0          0
UDP  kube-dns.kube-system.svc.clu rr
  -> 10.244.0.3:domain            Masq    1      0          0
TCP  10.96.100.7:https rr persistent 10800
  -> 10.244.1.9:pcsync-https      Masq    1      0          0
`

func TestParseListNames(t *testing.T) {
	st, err := ipvs.ParseList(namedListing)
	if err != nil {
		t.Fatal(err)
	}
	type server struct {
		as, addr   string
		port       uint16
		unresolved string
	}
	vs := func(i int) server {
		v := st.Services[i]
		return server{v.As, v.Address.String(), v.Port, v.Unresolved()}
	}
	rs := func(i, j int) server {
		r := st.Services[i].RealServers[j]
		return server{r.As, r.Address.String(), r.Port, r.Unresolved()}
	}
	for _, tc := range []struct {
		name      string
		got, want server
	}{
		{"a name cut at ipvsadm's width: neither address nor port", vs(0), server{"kubernetes.default.svc.clust", "invalid IP", 0, "address and port"}},
		{"a host name: no address; https is 443", vs(1), server{"apiserver:https", "invalid IP", 443, "address"}},
		{"a numeric real server", rs(1, 0), server{"", "192.168.1.10", 6443, ""}},
		{"a node name with a numeric port", vs(2), server{"node1:30080", "invalid IP", 30080, "address"}},
		{"a name that looks like an address is a name, cut", rs(2, 0), server{"10-244-1-5.web.default.svc:h", "invalid IP", 0, "address and port"}},
		{"http-alt is 8080 or 8008, by the node's /etc/services", rs(2, 1), server{"10.244.2.7:http-alt", "10.244.2.7", 0, "port"}},
		{"localhost is a name too", vs(3), server{"localhost:30080", "invalid IP", 30080, "address"}},
		{"http is 80", rs(3, 0), server{"10.244.1.5:http", "10.244.1.5", 80, ""}},
		{"domain is 53", vs(4), server{"10.96.0.10:domain", "10.96.0.10", 53, ""}},
		{"pcsync-https is 8443", rs(6, 0), server{"10.244.1.9:pcsync-https", "10.244.1.9", 8443, ""}},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, tc.got, tc.want)
		}
	}
	if v := st.Services[6]; !v.Persistent || v.Timeout != 10800 || v.Name() != "TCP  10.96.100.7:https rr persistent 10800" {
		t.Errorf("persistent service: %+v %q", v, v.Name())
	}
	// Real pastes: 11 prints every port it can as a name, and starts mid-listing.
	l11, err := ipvs.ParseList(read(t, "paste-11-ipvsadm-L.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if v := l11.Find("tcp", netip.MustParseAddr("100.64.134.163"), 5432, 0); v == nil || v.RealServers[2].Port != 5432 {
		t.Errorf("100.64.134.163:postgresql: %+v", v)
	}
	if !ipvs.IsList(read(t, "paste-11-ipvsadm-L.txt")) || ipvs.IsList("TCP  10.0.0.1:80 rr\n-A KUBE-SERVICES -j ACCEPT\n") {
		t.Error("IsList of a listing's excerpt")
	}
}

// Listings that are not the one ParseList reads are refused, not read as schedulers and weights.
func TestParseListRefuses(t *testing.T) {
	for _, text := range []string{
		// --stats: counters where the scheduler and forwarding method are
		"IP Virtual Server version 1.2.1 (size=4096)\nProt LocalAddress:Port               Conns   InPkts  OutPkts  InBytes OutBytes\n  -> RemoteAddress:Port\nTCP  10.96.0.1:443                       3       18       12     1200     3400\n  -> 172.18.0.2:6443                     3       18       12     1200     3400\n",
		// the same without its header
		"TCP  10.96.0.1:443                       3       18       12     1200     3400\n  -> 172.18.0.2:6443                     3       18       12     1200     3400\n",
		"TCP  10.96.0.1:443 rr\n  -> 172.18.0.2:6443 Bogus 1 0 0\n",
		"TCP  10.96.0.1:443 rr\n  -> 172.18.0.2:6443 Masq -1 0 0\n",
		"TCP  10.96.0.1:443 rr persistent\n",
		"ICMP  10.96.0.1:443 rr\n",
		"TCP  :443 rr\n",
	} {
		if _, err := ipvs.ParseList(text); err == nil {
			t.Errorf("%q parsed", text)
		}
	}
}

func sniff(t *testing.T, raw string) dataplanes.Sniffed {
	t.Helper()
	sn, ok, err := ipvs.Engine{}.Sniff(raw)
	if !ok || err != nil {
		t.Fatalf("Sniff: ok %v, %v", ok, err)
	}
	return sn
}

func TestSniffPaste(t *testing.T) {
	l08 := read(t, "paste-08-ipvsadm-Ln.txt")
	for _, tc := range []struct {
		name, raw string
		readAs    []string
		local     []string // a few of Local, in order
		nLocal    int
	}{
		{"a listing alone", l08, []string{"ipvsadm -Ln (34 virtual servers)"}, []string{"127.0.0.1", "172.17.0.1", "192.168.188.61", "10.96.0.1"}, 15},
		{"after its command, beside others", "$ kubectl get svc\nNAME  TYPE\n$ sudo ipvsadm -L -n\n" + l08 + "$ ip route\ndefault via 1.2.3.4\n",
			[]string{"ipvsadm -L -n (34 virtual servers)"}, []string{"127.0.0.1"}, 15},
		{"without -n", "$ ipvsadm -L\n" + namedListing, []string{"ipvsadm -L (names, not addresses: 7 virtual servers)"}, []string{"10.96.0.10", "10.96.100.7"}, 2},
		{"names, no command line", namedListing, []string{"ipvsadm -L (names, not addresses: 7 virtual servers)"}, []string{"10.96.0.10"}, 2},
		{"ports only as names", "$ ipvsadm -L\n" + read(t, "paste-11-ipvsadm-L.txt"), []string{"ipvsadm -L (ports as service names: 9 virtual servers)"}, []string{"100.64.134.163", "100.64.146.70"}, 7},
		{"with connection entries", "$ ipvsadm -Ln\n" + read(t, "vm-ipvsadm-Ln.txt") + "$ ipvsadm -Lnc\n" + read(t, "vm-ipvsadm-Lnc-after.txt"),
			[]string{"ipvsadm -Ln (3 virtual servers)", "ipvsadm -Lnc (6 connection entries)"}, []string{"172.18.0.2", "10.96.0.100", "10.244.0.1"}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The paste front end ends an output it shows whole with an empty prompt.
			sn := sniff(t, tc.raw+"\n$ ")
			if !slices.Equal(sn.ReadAs, tc.readAs) {
				t.Errorf("read as %q, want %q", sn.ReadAs, tc.readAs)
			}
			var local []string
			for _, a := range sn.Local {
				local = append(local, a.String())
			}
			if len(local) != tc.nLocal || !slices.Equal(local[:len(tc.local)], tc.local) {
				t.Errorf("local %v (%d), want %d starting %v", local, len(local), tc.nLocal, tc.local)
			}
			var st ipvs.State
			if err := json.Unmarshal(sn.Part, &st); err != nil || !st.FromPaste {
				t.Errorf("part: %v, fromPaste %v", err, st.FromPaste)
			}
		})
	}
	for _, raw := range []string{"$ iptables-save\n*nat\nCOMMIT\n", "-A KUBE-SERVICES -j ACCEPT\n", "TCP  10.0.0.1:80 rr\n"} {
		if _, ok, _ := (ipvs.Engine{}).Sniff(raw); ok {
			t.Errorf("%q taken for ipvsadm output", raw)
		}
	}
	for _, raw := range []string{
		"$ ipvsadm -Ln --stats\nIP Virtual Server version 1.2.1 (size=4096)\nProt LocalAddress:Port               Conns   InPkts  OutPkts  InBytes OutBytes\n",
		"$ ipvsadm -Lc\nIPVS connection entries\npro expire state       source             virtual            destination\nTCP 01:58  TIME_WAIT   client1:40004      web.default.svc:http 10-244-0-4.web:http-alt\n",
		"$ ipvsadm -Lnc\nIPVS connection entries\n",
		"$ ipvsadm -S -n\n-A -t 10.96.0.1:443 -s rr\n",
		"$ ipvsadm -Ln\n",                        // no virtual servers
		"$ ipvsadm -L\nTCP  node\xbf1:http rr\n", // not text
		"$ ipvsadm -L\nTCP  node1 rr\n",          // a name without its port, not cut
	} {
		if _, ok, err := (ipvs.Engine{}).Sniff(raw); !ok || err == nil {
			t.Errorf("%q: ok %v, err %v; want an error saying what to paste", raw, ok, err)
		}
	}
}

// traceOf walks a packet through a paste, with the node's addresses and those its listing shows (Sniffed.Local).
func traceOf(t *testing.T, raw string, node []string, req tracer.Request) *trace.Trace {
	t.Helper()
	var local []netip.Addr // the node's own; Load adds the virtual servers' addresses, as kube-ipvs0's
	for _, a := range node {
		local = append(local, netip.MustParseAddr(a))
	}
	s, err := tracer.Load([]byte(raw), local)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tracer.Trace(s, req)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func endpoints(tr *trace.Trace) map[string]float64 {
	m := map[string]float64{}
	for _, e := range tr.Endpoints {
		m[e.Addr()] = e.Probability
	}
	return m
}

// TestCutListing: ipvsadm prints no end mark, so a listing pasted after its command with nothing after it may have
// been cut: its last virtual server may have more real servers (before: their chances were given as if whole).
// A listing the paste shows whole (the next prompt after it, a closing fence) is read as whole.
func TestCutListing(t *testing.T) {
	l := "$ ipvsadm -Ln\n" + read(t, "vm-ipvsadm-Ln.txt")
	for _, tc := range []struct {
		name, raw, dst string
		verdict        string
		missing        string
	}{
		// Issue 35: a listing that ends with the paste is taken as whole, and the trace says it assumed so.
		{"the last virtual server of a listing that may go on", l, "10.244.0.1:30080", trace.Delivered, ""},
		{"another virtual server of it", l, "10.96.0.100:80", trace.Delivered, ""},
		{"the last virtual server of a whole listing", l + "$ \n", "10.244.0.1:30080", trace.Delivered, ""},
	} {
		tr := traceOf(t, tc.raw, []string{"172.18.0.2"}, tracer.Request{Dst: tc.dst, From: "node"})
		if tr.Verdict != tc.verdict || !strings.Contains(strings.Join(tr.Missing, "\n"), tc.missing) {
			t.Errorf("%s: verdict %s, missing %q; want %s, %q", tc.name, tr.Verdict, tr.Missing, tc.verdict, tc.missing)
		}
		if cut := !strings.HasSuffix(tc.raw, "$ \n"); cut && tc.dst == "10.244.0.1:30080" && !strings.Contains(strings.Join(tr.Notes, "\n"), "assumed: the IPVS listing ends where the paste does") {
			t.Errorf("%s: the notes do not say the listing was taken as whole: %q", tc.name, tr.Notes)
		}
	}
}

// A listing with names: where the packet's destination may be a server printed by name, the trace does not guess.
func TestTraceNamedListing(t *testing.T) {
	named := "$ ipvsadm -L\n" + namedListing
	l11 := "$ ipvsadm -L\n" + read(t, "paste-11-ipvsadm-L.txt")
	for _, tc := range []struct {
		name      string
		raw       string
		req       tracer.Request
		verdict   string
		endpoints map[string]float64
		missing   string // in the trace's Missing
	}{
		{"ClusterIP from the node: may be kubernetes.default.svc.cluster.local:https", named, tracer.Request{Dst: "10.96.0.1:443", From: "node"},
			trace.Unknown, nil, "kubernetes.default.svc.clust, apiserver:https"},
		{"NodePort on the node's address: node1:30080 or localhost:30080 may be it", named, tracer.Request{Dst: "192.168.1.10:30080"},
			trace.Unknown, nil, "node1:30080"},
		{"a ClusterIP from outside, not known to be local: kube-ipvs0 may hold it", named, tracer.Request{Dst: "10.96.0.77:443"},
			trace.Unknown, nil, "kubernetes.default.svc.clust, apiserver:https"},
		{"a server given by address (port as a name) is found", named, tracer.Request{Dst: "10.96.0.10:53", From: "node"},
			trace.Delivered, map[string]float64{"10.244.0.3:53": 1}, ""},
		{"UDP: the only UDP server is printed by a cut name", named, tracer.Request{Dst: "10.96.0.10:53", Proto: "udp", From: "node"},
			trace.Unknown, nil, "the address and port of virtual server kube-dns.kube-system.svc.clu: ipvsadm cut the name"},
		{"corpus 11: http is 80, three endpoints", l11, tracer.Request{Dst: "100.64.134.163:80", From: "node"},
			trace.Delivered, map[string]float64{"100.98.126.28:3000": 1.0 / 3, "100.98.253.19:3000": 1.0 / 3, "100.99.106.8:3000": 1.0 / 3}, ""},
		{"corpus 11: postgresql is 5432, on both sides", l11, tracer.Request{Dst: "100.64.134.163:5432", From: "node"},
			trace.Delivered, map[string]float64{"100.98.126.28:5432": 1.0 / 3, "100.98.253.19:5432": 1.0 / 3, "100.99.106.8:5432": 1.0 / 3}, ""},
		{"corpus 11: https to an http-alt endpoint, 8008 or 8080", l11, tracer.Request{Dst: "100.65.17.84:443", From: "node"},
			trace.Unknown, nil, "the port of real server 100.97.142.17:http-alt of TCP  100.65.17.84:https rr: the service name http-alt is port 8008 or 8080"},
		// No virtual server on that address and port in what the paste shows, and it may go on (an issue's
		// excerpt, after its command line, with no prompt after it).
		{"corpus 11: no server on that address and port in a listing that may go on", l11, tracer.Request{Dst: "100.64.134.163:22", From: "node"},
			trace.Unknown, map[string]float64{}, "the node's iptables rules"}, // taken as whole (issue 35): the iptables rules decide
		// The same listing shown whole: IPVS leaves the packet to the node's socket, but kube-proxy's iptables
		// rules (KUBE-IPVS-FILTER rejects unserved ports of its addresses since 1.26) are not in the paste.
		{"corpus 11: no server on that address and port: the iptables rules decide", l11 + "\n$ \n", tracer.Request{Dst: "100.64.134.163:22", From: "node"},
			trace.Unknown, map[string]float64{}, "the node's iptables rules: the paste holds only its IPVS table"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := traceOf(t, tc.raw, []string{"192.168.1.10"}, tc.req)
			got := endpoints(tr)
			if tr.Verdict != tc.verdict || tc.endpoints != nil && len(got) != len(tc.endpoints) {
				t.Fatalf("verdict %s, endpoints %v, missing %q; want %s %v", tr.Verdict, got, tr.Missing, tc.verdict, tc.endpoints)
			}
			for e, p := range tc.endpoints {
				if d := got[e] - p; d > 1e-9 || d < -1e-9 {
					t.Errorf("endpoint %s: %v, want %v", e, got[e], p)
				}
			}
			all := strings.Join(tr.Missing, "\n")
			if tc.missing == "" && all != "" || !strings.Contains(all, tc.missing) {
				t.Errorf("missing %q, want it to say %q", tr.Missing, tc.missing)
			}
			if tc.missing != "" && !strings.Contains(all, "paste `") {
				t.Errorf("missing %q does not say what to paste", tr.Missing)
			}
		})
	}
}

// kube-proxy binds every virtual server address on kube-ipvs0: with the addresses Sniff reports as the node's,
// a packet from outside to a ClusterIP or a NodePort reaches IPVS in INPUT. Without them it would be forwarded
// untranslated (the tracer takes Sniffed.Local into the node's addresses).
func TestVirtualServersAreLocal(t *testing.T) {
	l08 := read(t, "paste-08-ipvsadm-Ln.txt")
	for _, tc := range []struct {
		name string
		req  tracer.Request
		want map[string]float64
	}{
		{"NodePort on a node address (corpus 08)", tracer.Request{Dst: "192.168.188.61:30355", Src: "192.168.188.1"}, map[string]float64{"10.244.169.139:80": 0.5, "10.244.169.149:80": 0.5}},
		{"NodePort on docker0's address", tracer.Request{Dst: "172.17.0.1:30001", Src: "192.168.188.1"}, map[string]float64{"10.244.169.185:8443": 1}},
		{"ClusterIP from a pod network address", tracer.Request{Dst: "10.96.0.10:53", Proto: "udp", Src: "10.244.36.7"}, map[string]float64{"10.244.36.125:53": 0.5, "10.244.36.126:53": 0.5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := traceOf(t, l08, nil, tc.req)
			got := endpoints(tr)
			if tr.Verdict != trace.Delivered || len(got) != len(tc.want) {
				t.Fatalf("verdict %s endpoints %v, want %v", tr.Verdict, got, tc.want)
			}
			for e, p := range tc.want {
				if got[e] != p {
					t.Errorf("%s: %v, want %v", e, got[e], p)
				}
			}
		})
	}
}

// persistent N: the first packet's choice is the scheduler's; a note says a returning client is pinned.
func TestPersistentNote(t *testing.T) {
	for _, tc := range []struct {
		name, raw, dst, note string
		want                 map[string]float64
	}{
		{"corpus 05: one apiserver", read(t, "paste-05-ipvsadm-ln.txt"), "10.0.0.1:443",
			"persistent 10800: IPVS sends every connection from the same client address to the same real server for 10800 s after the last one (a persistence template), so a client that connected before goes where it went then, not by rr",
			map[string]float64{"192.168.0.1:6443": 1}},
		{"two apiservers, a client network", "TCP  10.254.0.1:443 rr persistent 600 mask 255.255.255.0\n  -> 172.16.16.81:6443            Masq    1      0          0\n  -> 172.16.16.82:6443            Masq    1      0          0\n", "10.254.0.1:443",
			"persistent 600: IPVS sends every connection from the same client network (mask 255.255.255.0) to the same real server for 600 s after the last one",
			map[string]float64{"172.16.16.81:6443": 0.5, "172.16.16.82:6443": 0.5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := traceOf(t, tc.raw, []string{"192.168.0.5"}, tracer.Request{Dst: tc.dst, From: "node"})
			got := endpoints(tr)
			if tr.Verdict != trace.Delivered || len(got) != len(tc.want) {
				t.Fatalf("verdict %s endpoints %v", tr.Verdict, got)
			}
			for e, p := range tc.want {
				if got[e] != p {
					t.Errorf("%s: %v, want %v", e, got[e], p)
				}
			}
			if !slices.ContainsFunc(tr.Notes, func(n string) bool { return strings.HasPrefix(n, tc.note) }) {
				t.Errorf("notes %q, want %q", tr.Notes, tc.note)
			}
		})
	}
	// Not persistent: no such note.
	tr := traceOf(t, read(t, "paste-05-ipvsadm-ln.txt"), []string{"192.168.0.5"}, tracer.Request{Dst: "10.0.0.10:53", Proto: "udp", From: "node"})
	for _, n := range tr.Notes {
		if strings.HasPrefix(n, "persistent") {
			t.Errorf("note %q for a service that is not persistent", n)
		}
	}
}

// A pasted ipvsadm listing alone does not show what masquerades the packets IPVS translates (kube-proxy's iptables
// rules): the path is still delivered to its real server, and a note says the source it sees is not known. With
// kube-proxy's nat rules beside it (the iptables engine, opened first, covers "nat"), the rules decide it.
func TestMasqueradeUnknownWithoutNATRules(t *testing.T) {
	listing := read(t, "vm-ipvsadm-Ln.txt")
	req := tracer.Request{Dst: "172.18.0.2:30080", Src: "172.18.0.1"}
	alone := traceOf(t, "$ ipvsadm -Ln\n"+listing, []string{"172.18.0.2"}, req)
	if alone.Verdict != trace.Delivered || len(alone.Endpoints) != 3 || !slices.Contains(alone.Notes, ipvs.MasqueradeUnknownNote) {
		t.Errorf("ipvsadm -Ln alone: verdict %s, %d endpoints, notes %q; want delivered to 3, with the note that the source is unknown", alone.Verdict, len(alone.Endpoints), alone.Notes)
	}

	sn := sniff(t, "$ ipvsadm -Ln\n"+listing)
	for _, tc := range []struct {
		covered map[string]bool
		want    bool
	}{{nil, true}, {map[string]bool{"filter": true}, true}, {map[string]bool{"nat": true}, false}} {
		op, err := ipvs.Engine{}.Open(sn.Part, dataplanes.OpenOptions{Covered: tc.covered})
		if err != nil {
			t.Fatal(err)
		}
		if got := op.Rulesets[0].(*ipvs.Ruleset).MasqueradeUnknown; got != tc.want {
			t.Errorf("covered %v: MasqueradeUnknown %v, want %v", tc.covered, got, tc.want)
		}
	}

	// The same listing with the node's iptables-save and ipsets: kube-proxy's KUBE-NODE-PORT marks the packet and
	// KUBE-POSTROUTING masquerades it.
	ipt, _ := json.Marshal(map[string]string{"input": read(t, "vm-iptables-save.txt")})
	sets, err := netstate.ParseIPSetSave(read(t, "vm-ipset-save.txt"))
	if err != nil {
		t.Fatal(err)
	}
	net := netstate.FromLocalAddresses(append(sn.Local, netip.MustParseAddr("172.18.0.2")))
	net.IPSets = sets
	both := &snapshot.Snapshot{Version: snapshot.Version, Net: net,
		Engines: map[dataplanes.Name]json.RawMessage{dataplanes.IPTables: ipt, dataplanes.IPVS: sn.Part}}
	tr, err := tracer.Trace(both, req)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Verdict != trace.Delivered || len(tr.Endpoints) != 3 || slices.Contains(tr.Notes, ipvs.MasqueradeUnknownNote) || tr.SNAT == "" || tr.SNAT == "172.18.0.1" {
		t.Errorf("with iptables-save: verdict %s, %d endpoints, snat %q, notes %q; want masqueraded, without the note", tr.Verdict, len(tr.Endpoints), tr.SNAT, tr.Notes)
	}
}

// SCTP virtual servers (corpus 10): IPVS schedules SCTP as it does TCP and UDP. (The tracer's --proto takes tcp
// and udp only; the walk is run directly.)
func TestSCTPVirtualServer(t *testing.T) {
	sn := sniff(t, "$ sudo ipvsadm -ln\n"+read(t, "paste-10-ipvsadm-ln.txt"))
	op, err := ipvs.Engine{}.Open(sn.Part, dataplanes.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	net := netstate.FromLocalAddresses(sn.Local)
	flow := trace.Flow{Src: netip.MustParseAddr("10.0.2.2"), Sport: 5000, Dst: netip.MustParseAddr("10.0.2.15"), Dport: 31514, Proto: "sctp"}
	paths, _, _ := netfilter.Run(op.Rulesets, &net, flow, netfilter.Origin{Iif: "eth0"}, nil)
	got := map[string]float64{}
	for _, p := range paths {
		if p.Verdict != trace.Delivered || p.Endpoint == nil {
			t.Fatalf("path %s %+v", p.Verdict, p.Endpoint)
		}
		got[p.Endpoint.Addr()] = p.Probability
	}
	if len(got) != 3 || got["20.20.195.136:1000"] != 1.0/3 {
		t.Errorf("endpoints %v, want 20.20.195.135-137:1000 a third each", got)
	}
}
