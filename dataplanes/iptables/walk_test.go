package iptables

import (
	"fmt"
	"math"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
	"github.com/k8sguide/k8sguide/dataplanes/netstate"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// The exact chances kube-proxy's cascade gives 3 endpoints: 0.33333333349 and 0.5 are stored as
// round(2^31 * p) / 2^31.
var (
	first3  = 715827883.0 / 2147483648.0
	second3 = (1 - first3) * 0.5
)

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// workerNet is the network of node t1-worker of a netns lab (172.18.0.3, pods 10.244.1.0/24), captured with
// the rules in testdata/iptables-worker.save.
func workerNet(t *testing.T) *netstate.State {
	t.Helper()
	addrs, err := netstate.ParseAddresses([]byte(readFile(t, "iptables-worker.addr.json")))
	if err != nil {
		t.Fatal(err)
	}
	routes, err := netstate.ParseRoutes([]byte(readFile(t, "iptables-worker.routes.json")))
	if err != nil {
		t.Fatal(err)
	}
	return &netstate.State{Addresses: addrs, Routes: routes, Sysctls: map[string]string{"net.ipv4.ip_forward": "1"}}
}

func walk(t *testing.T, r *Rules, n *netstate.State, src, dst string, origin netfilter.Origin) []trace.Path {
	t.Helper()
	d := netip.MustParseAddrPort(dst)
	f := trace.Flow{Src: netip.MustParseAddr(src), Dst: d.Addr(), Dport: d.Port(), Proto: "tcp"}
	paths, _, _ := netfilter.Run([]netfilter.Ruleset{r}, n, f, origin, nil)
	return paths
}

func byEndpoint(paths []trace.Path) map[string]trace.Path {
	m := map[string]trace.Path{}
	for _, p := range paths {
		if p.Endpoint != nil {
			m[p.Endpoint.Addr()] = p
		}
	}
	return m
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-12 }

func TestNodePortFromClientCapturedLab(t *testing.T) {
	r, err := ParseSave(readFile(t, "iptables-worker.save"))
	if err != nil {
		t.Fatal(err)
	}
	paths := walk(t, r, workerNet(t), "172.18.0.1", "172.18.0.3:31103", netfilter.Origin{Iif: "eth0"})
	if len(paths) != 3 {
		t.Fatalf("want 3 paths, got %d", len(paths))
	}
	eps := byEndpoint(paths)
	want := map[string]struct {
		p    float64
		snat string
	}{
		"10.244.1.2:80": {first3, "10.244.1.1"}, // local pod: out of cni0, masqueraded to cni0's address
		"10.244.1.3:80": {second3, "10.244.1.1"},
		"10.244.2.2:80": {second3, "172.18.0.3"}, // remote pod: out of eth0
	}
	for ep, w := range want {
		p, ok := eps[ep]
		if !ok {
			t.Fatalf("no path to %s; paths: %s", ep, summary(paths))
		}
		if !near(p.Probability, w.p) {
			t.Errorf("%s: probability %.15f, want %.15f", ep, p.Probability, w.p)
		}
		if p.Verdict != trace.Delivered || p.SNAT != w.snat {
			t.Errorf("%s: verdict %s snat %s, want delivered %s", ep, p.Verdict, p.SNAT, w.snat)
		}
	}
	// The rules the kernel's TRACE showed for this flow (xtables-monitor, same lab) for endpoint 10.244.2.2.
	var matched []string
	for _, h := range eps["10.244.2.2:80"].Hops {
		if h.Matched && h.Rule > 0 {
			matched = append(matched, h.Table+":"+h.Chain+":"+h.Verdict)
		}
	}
	got := strings.Join(matched, " ")
	wantSeq := "nat:PREROUTING:jump KUBE-SERVICES nat:KUBE-SERVICES:jump KUBE-NODEPORTS " +
		"nat:KUBE-NODEPORTS:jump KUBE-EXT-LOLE4ISW44XBNF3G nat:KUBE-EXT-LOLE4ISW44XBNF3G:jump KUBE-MARK-MASQ " +
		"nat:KUBE-MARK-MASQ:continue nat:KUBE-EXT-LOLE4ISW44XBNF3G:jump KUBE-SVC-LOLE4ISW44XBNF3G " +
		"nat:KUBE-SVC-LOLE4ISW44XBNF3G:jump KUBE-SEP-QHWUG6SOC7OJ2BZK nat:KUBE-SEP-QHWUG6SOC7OJ2BZK:dnat to 10.244.2.2:80 " +
		"filter:FORWARD:jump KUBE-PROXY-FIREWALL filter:FORWARD:jump KUBE-FORWARD filter:KUBE-FORWARD:accept " +
		"nat:POSTROUTING:jump KUBE-POSTROUTING nat:KUBE-POSTROUTING:continue nat:KUBE-POSTROUTING:masquerade to 172.18.0.3"
	if got != wantSeq {
		t.Errorf("matched rules:\n got %s\nwant %s", got, wantSeq)
	}
}

func TestWhyNot(t *testing.T) {
	r, err := ParseSave(readFile(t, "iptables-worker.save"))
	if err != nil {
		t.Fatal(err)
	}
	paths := walk(t, r, workerNet(t), "172.18.0.1", "172.18.0.3:31103", netfilter.Origin{Iif: "eth0"})
	var reasons []string
	for _, h := range paths[0].Hops {
		if !h.Matched {
			reasons = append(reasons, h.Chain+"#"+string(rune('0'+h.Rule))+": "+h.Reason)
		}
	}
	all := strings.Join(reasons, "\n")
	for _, want := range []string{
		"KUBE-SERVICES#1: destination 172.18.0.3 (rule wants -d 10.96.12.123/32)",
		"KUBE-NODEPORTS#1: destination 172.18.0.3 (rule wants -d 127.0.0.0/8)",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("missing reason %q in:\n%s", want, all)
		}
	}
}

func TestUnknownPortIsLocal(t *testing.T) {
	r, _ := ParseSave(readFile(t, "iptables-worker.save"))
	paths := walk(t, r, workerNet(t), "172.18.0.1", "172.18.0.3:31999", netfilter.Origin{Iif: "eth0"})
	if len(paths) != 1 || paths[0].Verdict != trace.Local {
		t.Fatalf("want one local path, got %s", summary(paths))
	}
}

func TestClusterIPHairpinFromPod(t *testing.T) {
	r, _ := ParseSave(readFile(t, "iptables-worker.save"))
	paths := walk(t, r, workerNet(t), "10.244.1.2", "10.96.12.123:80", netfilter.Origin{Iif: "cni0"})
	eps := byEndpoint(paths)
	if p := eps["10.244.1.2:80"]; p.SNAT != "10.244.1.1" {
		t.Errorf("pod to its own Service, back to itself: SNAT %q, want 10.244.1.1 (KUBE-SEP hairpin masquerade)", p.SNAT)
	}
	if p := eps["10.244.1.3:80"]; p.SNAT != "10.244.1.2" {
		t.Errorf("pod to a neighbour through the Service: SNAT %q, want none (10.244.1.2)", p.SNAT)
	}
}

func TestLocalhostNodePortFromNode(t *testing.T) {
	r, _ := ParseSave(readFile(t, "iptables-worker.save"))
	paths := walk(t, r, workerNet(t), "127.0.0.1", "127.0.0.1:31103", netfilter.Origin{FromNode: true})
	if len(paths) != 3 {
		t.Fatalf("iptables mode serves NodePorts on localhost: want 3 paths, got %d: %s", len(paths), summary(paths))
	}
	for _, p := range paths {
		if p.Verdict != trace.Delivered || p.SNAT == "127.0.0.1" {
			t.Errorf("path to %v: verdict %s snat %s", p.Endpoint, p.Verdict, p.SNAT)
		}
	}
}

// The guide's NodePort walkthrough (seed 000), pasted as it is printed: `iptables -t nat -nvL` listings
// of PREROUTING, KUBE-SERVICES (grepped), KUBE-NODEPORTS (old shape: KUBE-MARK-MASQ directly in it),
// KUBE-SVC and KUBE-SEP chains, on node k8s-guide-worker2 (192.168.224.4), NodePort 30510.
func TestSeedNodePortListing(t *testing.T) {
	r, err := ParseListing(readFile(t, "seed000-nodeport.listing"), "nat")
	if err != nil {
		t.Fatal(err)
	}
	n := netstate.FromLocalAddresses([]netip.Addr{netip.MustParseAddr("192.168.224.4")})
	paths := walk(t, r, &n, "192.168.224.1", "192.168.224.4:30510", netfilter.Origin{Iif: "eth0"})
	eps := byEndpoint(paths)
	want := map[string]float64{"10.244.1.6:80": first3, "10.244.2.7:80": second3, "10.244.2.8:80": second3}
	if len(eps) != 3 {
		t.Fatalf("want 3 endpoints, got %s", summary(paths))
	}
	for ep, p := range want {
		if !near(eps[ep].Probability, p) {
			t.Errorf("%s: %.15f, want %.15f", ep, eps[ep].Probability, p)
		}
		if eps[ep].SNAT != "192.168.224.4" {
			t.Errorf("%s: snat %s, want the node's address (KUBE-MARK-MASQ in KUBE-NODEPORTS)", ep, eps[ep].SNAT)
		}
	}
}

// The `iptables-save | grep` fragment of seed 001 (old kube-proxy, no KUBE-EXT chain, comment
// "default/k8s-nginx-node:"): no table header, no built-in chains.
func TestSeedSaveFragment(t *testing.T) {
	r, err := ParseSave(readFile(t, "seed001-nodeport.save"))
	if err != nil {
		t.Fatal(err)
	}
	if !r.Partial {
		t.Error("a fragment should be marked partial")
	}
	n := netstate.FromLocalAddresses([]netip.Addr{netip.MustParseAddr("10.0.0.5")})
	paths := walk(t, r, &n, "192.0.2.1", "10.0.0.5:30136", netfilter.Origin{Iif: "eth0"})
	eps := byEndpoint(paths)
	// 0.33332999982 is what that kube-proxy printed for 1/3 then.
	p1 := math.Round(0x80000000*0.33332999982) / 0x80000000
	for ep, p := range map[string]float64{"10.244.0.113:80": p1, "10.244.0.114:80": (1 - p1) / 2, "10.244.0.115:80": (1 - p1) / 2} {
		if !near(eps[ep].Probability, p) {
			t.Errorf("%s: %.15f, want %.15f", ep, eps[ep].Probability, p)
		}
	}
}

// Seed 004, use case 2: the node k8s-guide-worker (172.18.0.12) calls ClusterIP 10.96.94.225:80; OUTPUT →
// KUBE-SERVICES → KUBE-MARK-MASQ (source outside the pod CIDR) → KUBE-SVC → KUBE-SEP → DNAT, then
// KUBE-POSTROUTING masquerades.
func TestSeedClusterIPFromNode(t *testing.T) {
	r, err := ParseListing(readFile(t, "seed004-clusterip.listing"), "nat")
	if err != nil {
		t.Fatal(err)
	}
	n := netstate.FromLocalAddresses([]netip.Addr{netip.MustParseAddr("172.18.0.12")})
	paths := walk(t, r, &n, "172.18.0.12", "10.96.94.225:80", netfilter.Origin{FromNode: true})
	eps := byEndpoint(paths)
	// The walkthrough lists KUBE-SEP-MHDQ23KUGG7EGFMW (10.244.1.3) but not the other endpoint's chain.
	if len(paths) != 2 || len(eps) != 1 {
		t.Fatalf("want 2 paths, one to 10.244.1.3:80; got %s", summary(paths))
	}
	for ep, p := range eps {
		if !near(p.Probability, 0.5) {
			t.Errorf("%s: %.15f, want 0.5", ep, p.Probability)
		}
		var masq bool
		for _, h := range p.Hops {
			if h.Chain == "KUBE-POSTROUTING" && strings.HasPrefix(h.Verdict, "masquerade") {
				masq = true
			}
		}
		if !masq {
			t.Errorf("%s: not masqueraded in KUBE-POSTROUTING", ep)
		}
	}
}

func summary(paths []trace.Path) string {
	var b strings.Builder
	for _, p := range paths {
		ep := "-"
		if p.Endpoint != nil {
			ep = p.Endpoint.Addr()
		}
		var hops []string
		for _, h := range p.Hops {
			if h.Matched {
				hops = append(hops, h.Chain+"#"+strconv.Itoa(h.Rule)+" "+h.Verdict)
			}
		}
		fmt.Fprintf(&b, "\n  p=%.6f %s %s snat=%s: %s", p.Probability, p.Verdict, ep, p.SNAT, strings.Join(hops, " | "))
	}
	return b.String()
}
