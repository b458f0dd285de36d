package nftables

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// TestIptablesNFTStatisticAndMarks: what nft prints for iptables-nft's kube-proxy rules. `-m statistic --mode
// random --probability P` is `meta random & 2147483647 < round(P * 2^31)`: a random choice of exactly that
// chance, not a match that always holds. MARK --or-mark, --and-mark, --xor-mark and --set-xmark are `mark set
// mark or|and|xor …`: computed, so that the masquerade bit is really set and cleared.
func TestIptablesNFTStatisticAndMarks(t *testing.T) {
	listing := `table ip nat {
	chain PREROUTING {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr 10.43.0.10 tcp dport 80 counter packets 0 bytes 0 jump KUBE-SVC-X
	}
	chain OUTPUT {
		type nat hook output priority dstnat; policy accept;
	}
	chain KUBE-SVC-X {
		meta random & 2147483647 < 715827883 counter packets 0 bytes 0 jump KUBE-SEP-1
		 meta random & 2147483647 < 1073741824 counter packets 0 bytes 0 jump KUBE-SEP-2
		counter packets 0 bytes 0 jump KUBE-SEP-3
	}
	chain KUBE-SEP-1 {
		meta mark set mark or 0x4000 counter packets 0 bytes 0
		meta l4proto tcp counter packets 0 bytes 0 dnat to 10.42.0.1:80
	}
	chain KUBE-SEP-2 {
		meta mark set mark and 0xffffbfff xor 0x4000 counter packets 0 bytes 0
		meta l4proto tcp counter packets 0 bytes 0 dnat to 10.42.0.2:80
	}
	chain KUBE-SEP-3 {
		meta mark set mark or 0x4000 counter packets 0 bytes 0
		meta mark set mark and 0xffffbfff counter packets 0 bytes 0
		meta l4proto tcp counter packets 0 bytes 0 dnat to 10.42.0.3:80
	}
	chain POSTROUTING {
		type nat hook postrouting priority srcnat; policy accept;
		mark and 0x4000 != 0x4000 counter packets 0 bytes 0 return
		meta mark set mark xor 0x4000 counter packets 0 bytes 0
		counter packets 0 bytes 0 masquerade fully-random
	}
}
`
	tr, _ := traceDump(t, listing, "198.51.100.7", "10.43.0.10:80", "tcp", false, "192.168.0.2")
	p1 := 715827883 / math.Exp2(31)
	want := map[string]float64{"10.42.0.1:80": p1, "10.42.0.2:80": (1 - p1) * 0.5, "10.42.0.3:80": (1 - p1) * 0.5}
	got := endpoints(tr)
	if tr.Verdict != trace.Delivered || len(got) != 3 {
		t.Fatalf("verdict %s, endpoints %v\n%s", tr.Verdict, got, dump(tr))
	}
	for ep, p := range want {
		if math.Abs(got[ep]-p) > 1e-12 {
			t.Errorf("%s: chance %v, want %v", ep, got[ep], p)
		}
	}
	if math.Abs(p1-0.33333333349) > 1e-11 {
		t.Errorf("chance of the first endpoint %v: kube-proxy writes 0.33333333349", p1)
	}
	for _, p := range tr.Paths {
		masq := p.SNAT == "192.168.0.2"
		if wantMasq := p.Endpoint.IP != "10.42.0.3"; masq != wantMasq {
			t.Errorf("%s: source %s\n%s", p.Endpoint.Addr(), p.SNAT, dump(tr))
		}
		if h := hopOf(p, "KUBE-SVC-X", 1); h == nil || h.Probability != p1 {
			t.Errorf("the first statistic rule %+v", h)
		}
	}
	if h := hopOf(tr.Paths[0], "POSTROUTING", 2); tr.Paths[0].Endpoint.IP != "10.42.0.3" && (h == nil || h.Changes[0] != "mark 0x4000 -> 0x0") {
		t.Errorf("xor: %+v", h)
	}
}

// TestIptablesNFTXt: an xt statement nft prints without its arguments (`nft -j` always, the text when nft has
// no translation): a target that changes the packet or its path, or a match whose truth matters, ends the walk
// unknown, naming it; a target that only logs and a comment go on.
func TestIptablesNFTXt(t *testing.T) {
	for _, c := range []struct {
		name, exprs string // the first rule of ip nat KUBE-SEP-X, before a rule `dnat to 10.42.0.9:80`
		missing     string // "": the walk goes on to the dnat
	}{
		{"target DNAT", `{"xt": {"type": "target", "name": "DNAT"}}`, "what iptables-nft's xt target DNAT in ip nat KUBE-SEP-X does: nft prints it without its arguments; use iptables-nft-save for these tables"},
		{"target MARK after a counter", `{"counter": null}, {"xt": {"type": "target", "name": "MARK"}}`, "xt target MARK in ip nat KUBE-SEP-X"},
		{"target MASQUERADE", `{"xt": {"type": "target", "name": "MASQUERADE"}}`, "xt target MASQUERADE"},
		{"match that decides", `{"xt": {"type": "match", "name": "recent"}}, {"accept": null}`, "whether iptables-nft's xt match recent in ip nat KUBE-SEP-X matches"},
		{"match that decides nothing", `{"xt": {"type": "match", "name": "physdev"}}, {"counter": null}`, ""},
		{"comment", `{"xt": {"type": "match", "name": "comment"}}, {"counter": null}, {"xt": {"type": "target", "name": "LOG"}}`, ""},
		{"a failing match before it", `{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "saddr"}}, "right": "1.1.1.1"}}, {"xt": {"type": "target", "name": "DNAT"}}`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			js := fmt.Sprintf(`{"nftables": [{"table": {"family": "ip", "name": "nat"}},
{"chain": {"family": "ip", "table": "nat", "name": "OUTPUT", "type": "nat", "hook": "output", "prio": -100, "policy": "accept"}},
{"chain": {"family": "ip", "table": "nat", "name": "PREROUTING", "type": "nat", "hook": "prerouting", "prio": -100, "policy": "accept"}},
{"chain": {"family": "ip", "table": "nat", "name": "KUBE-SEP-X"}},
{"rule": {"family": "ip", "table": "nat", "chain": "PREROUTING", "expr": [{"jump": {"target": "KUBE-SEP-X"}}]}},
{"rule": {"family": "ip", "table": "nat", "chain": "KUBE-SEP-X", "expr": [%s]}},
{"rule": {"family": "ip", "table": "nat", "chain": "KUBE-SEP-X", "expr": [{"dnat": {"addr": "10.42.0.9", "port": 80}}]}}]}`, c.exprs)
			tr, _ := traceDump(t, js, "198.51.100.7", "10.43.0.10:80", "tcp", false, "192.168.0.2")
			if c.missing == "" {
				if tr.Verdict != trace.Delivered || len(tr.Endpoints) != 1 || tr.Endpoints[0].Addr() != "10.42.0.9:80" {
					t.Fatalf("verdict %s, missing %q\n%s", tr.Verdict, tr.Missing, dump(tr))
				}
				return
			}
			if tr.Verdict != trace.Unknown || len(tr.Endpoints) != 0 || !missingHas(tr, c.missing) {
				t.Fatalf("verdict %s, missing %q\n%s", tr.Verdict, tr.Missing, dump(tr))
			}
		})
	}
	// The text shows `xt target NAME` for a target nft cannot translate.
	listing := "table ip nat {\n\tchain PREROUTING {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t\tip daddr 10.43.0.10 counter packets 0 bytes 0 xt target REDIRECT\n\t}\n\tchain OUTPUT {\n\t\ttype nat hook output priority dstnat; policy accept;\n\t}\n}\n"
	tr, _ := traceDump(t, listing, "198.51.100.7", "10.43.0.10:80", "tcp", false, "192.168.0.2")
	if tr.Verdict != trace.Unknown || !missingHas(tr, "xt target REDIRECT in ip nat PREROUTING") {
		t.Fatalf("verdict %s, missing %q", tr.Verdict, tr.Missing)
	}
	if strings.Contains(dump(tr), "assumed") {
		t.Errorf("an xt target is not assumed away:\n%s", dump(tr))
	}
}
