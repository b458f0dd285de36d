package iptables

import (
	"net/netip"
	"os"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
	"github.com/k8sguide/k8sguide/dataplanes/netstate"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// FuzzParse feeds arbitrary text to both parsers and walks whatever they accept: no input may panic.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"iptables-worker.save", "seed001-nodeport.save", "seed000-nodeport.listing", "seed004-clusterip.listing"} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Add("*nat\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -j X\n-A X -j PREROUTING\nCOMMIT\n")
	f.Add("-A KUBE-SVC-X -m statistic --mode random --probability 2 -j KUBE-SEP-Y \"")
	n := netstate.FromLocalAddresses([]netip.Addr{netip.MustParseAddr("172.18.0.3")})
	flow := trace.Flow{Src: netip.MustParseAddr("172.18.0.1"), Dst: netip.MustParseAddr("172.18.0.3"), Dport: 30080, Proto: "tcp"}
	f.Fuzz(func(t *testing.T, text string) {
		for _, parse := range []func(string) (*Rules, error){ParseSave, func(s string) (*Rules, error) { return ParseListing(s, "") }} {
			r, err := parse(text)
			if err != nil {
				continue
			}
			netfilter.Run([]netfilter.Ruleset{r}, &n, flow, netfilter.Origin{Iif: "eth0"}, nil)
		}
	})
}
