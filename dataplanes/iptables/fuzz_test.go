package iptables

import (
	"net/netip"
	"os"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
	"github.com/k8sguide/k8sguide/dataplanes/netstate"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// FuzzParse feeds arbitrary text to both parsers, and to the reader of pasted dumps (several outputs after their
// `$ COMMAND` lines: iptables-save, -S, -L), and walks whatever they accept: no input may panic, and a walk
// whose outcome is unknown must say what is missing.
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
	f.Add("$ iptables -t nat -S\n-P PREROUTING ACCEPT\n-N A\n-A PREROUTING -j A\n-I A 2 -j DNAT --to-destination 10.0.0.1:80\n$ iptables -L -n\nChain FORWARD (policy DROP)\ntarget prot opt source destination\nACCEPT all -- anywhere localhost tcp dpt:http")
	f.Add("$ ipt KUBE-SERVICES | grep X\n    1    60 KUBE-NODEPORTS  all  --  *      *       0.0.0.0/0            0.0.0.0/0\n*nat\n:A - [0:0]\n-X A\n-F B\n-A A -j")
	n := netstate.FromLocalAddresses([]netip.Addr{netip.MustParseAddr("172.18.0.3")})
	flow := trace.Flow{Src: netip.MustParseAddr("172.18.0.1"), Dst: netip.MustParseAddr("172.18.0.3"), Dport: 30080, Proto: "tcp"}
	f.Fuzz(func(t *testing.T, text string) {
		for _, parse := range []func(string) (*Rules, error){ParseSave, func(s string) (*Rules, error) { return ParseListing(s, "") }, parse} {
			r, err := parse(text)
			if err != nil {
				continue
			}
			paths, _, _ := netfilter.Run([]netfilter.Ruleset{r}, &n, flow, netfilter.Origin{Iif: "eth0"}, nil)
			for _, p := range paths {
				if p.Verdict == trace.Unknown && len(p.Missing) == 0 {
					t.Fatalf("an unknown path that names nothing missing: %+v", p)
				}
			}
		}
	})
}
