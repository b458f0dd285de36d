package nftables

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/inspect/netfilter"
	"github.com/k8sguide/k8sguide/inspect/trace"
)

// FuzzParseRuleset: no input makes the parser or the walk panic (both recover, so a recovered panic is
// reported here as a failure), and whatever parses can be walked.
func FuzzParseRuleset(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.json")
	for _, js := range files {
		if strings.HasSuffix(js, ".addr.json") || strings.HasSuffix(js, ".routes.json") {
			continue
		}
		data, err := os.ReadFile(js)
		if err != nil {
			f.Fatal(err)
		}
		text, _ := os.ReadFile(strings.TrimSuffix(js, ".json") + ".nft")
		f.Add(data, string(text))
	}
	f.Add([]byte(`{"nftables": [{"table": {"family": "ip", "name": "t"}}]}`), "table ip t {\n\tchain c {\n\t\taccept # handle 1\n\t}\n}\n")
	state := nodeState(f, "nftables-worker")
	flows := []struct {
		src, dst string
		o        netfilter.Origin
	}{
		{"172.18.0.1:40002", "172.18.0.3:30696", netfilter.Origin{Iif: "eth0"}},
		{"10.244.1.2", "10.96.227.102:80", netfilter.Origin{Iif: "cni0"}},
		{"127.0.0.1", "127.0.0.1:30696", netfilter.Origin{FromNode: true}},
	}
	f.Fuzz(func(t *testing.T, data []byte, text string) {
		rs, err := ParseRuleset(data, text)
		if err != nil {
			if strings.Contains(err.Error(), "internal error") {
				t.Fatal(err)
			}
			return
		}
		for _, tb := range rs.Tables {
			for _, c := range tb.Chains {
				for _, r := range c.Rules {
					_ = RenderRule(r)
				}
			}
		}
		for _, fl := range flows {
			pkt := trace.Packet{Src: fl.src, Dst: fl.dst, Proto: "tcp"}
			flow, err := pkt.ParseFlow()
			if err != nil {
				t.Fatal(err)
			}
			_, notes, _ := netfilter.Run([]netfilter.Ruleset{rs}, state, flow, fl.o, nil)
			for _, n := range notes {
				if strings.Contains(n, "tracer failed") {
					t.Fatal(n)
				}
			}
		}
	})
}
