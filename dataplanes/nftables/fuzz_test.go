package nftables

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
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

// FuzzParseText: no input makes ParseText panic (it recovers, so a recovered panic is reported here as a
// failure), what it returns holds together (rule texts are parts of the input, sets have their lookup maps),
// and it can be rendered and walked.
func FuzzParseText(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.nft")
	for _, name := range files {
		text, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(text))
	}
	f.Add("table ip t {\n\tchain c {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t\tip daddr . tcp dport vmap { 1.1.1.1 . 80 : goto d }\n\t}\n\tchain d {\n\t\tdnat to 10.0.0.1:80\n\t}\n}\n")
	f.Add("table ip t {\n\tset s {\n\t\ttype ipv4_addr\n\t\tflags interval\n\t\telements = { 10.0.0.0/8, 1.1.1.1-1.1.1.9 }\n\t}\n}\n")
	state := nodeState(f, "nftables-worker")
	flows := []struct {
		src, dst string
		o        netfilter.Origin
	}{
		{"172.18.0.1:40002", "172.18.0.3:30696", netfilter.Origin{Iif: "eth0"}},
		{"10.244.1.2", "10.96.227.102:80", netfilter.Origin{Iif: "cni0"}},
	}
	f.Fuzz(func(t *testing.T, text string) {
		rs, err := ParseText(text)
		if err != nil {
			if strings.Contains(err.Error(), "internal error") {
				t.Fatal(err)
			}
			return
		}
		for _, tb := range rs.Tables {
			for _, c := range tb.Chains {
				if tb.Chain(c.Name) == nil {
					t.Fatalf("chain %q is not in the table's index", c.Name)
				}
				for _, r := range c.Rules {
					if !strings.Contains(text, r.Text) {
						t.Fatalf("rule text %q is not in the input", r.Text)
					}
					for _, s := range r.Stmts {
						if s == nil || s.Kind == "" {
							t.Fatalf("rule %q: empty statement", r.Text)
						}
					}
					_ = RenderRule(r)
				}
			}
			for _, s := range tb.Sets {
				if tb.Set(s.Name) == nil {
					t.Fatalf("set %q is not in the table's index", s.Name)
				}
			}
		}
		if hasChainLoop(rs) {
			// The kernel refuses a ruleset whose chains loop; the walk's budget stops one, but only after
			// seconds. Broken text makes such loops easily (a lost "}" merges two chains).
			return
		}
		rs.Leave(nil)
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

// hasChainLoop says whether a chain of rs can reach itself by jumps and gotos (of rules and verdict maps).
func hasChainLoop(rs *Ruleset) bool {
	for _, tb := range rs.Tables {
		targets := map[string][]string{}
		var verdicts func(c string, e *Expr)
		verdicts = func(c string, e *Expr) {
			if e == nil {
				return
			}
			if e.Kind == KVerdict && e.Target != "" {
				targets[c] = append(targets[c], e.Target)
			}
			if e.Kind == KSetRef {
				if s := tb.Set(e.Str); s != nil {
					for _, el := range s.Elems {
						verdicts(c, el.Value)
					}
				}
			}
			for _, a := range e.Args {
				verdicts(c, a)
			}
		}
		for _, c := range tb.Chains {
			for _, r := range c.Rules {
				for _, s := range r.Stmts {
					if s.Target != "" && s.Kind == SVerdict {
						targets[c.Name] = append(targets[c.Name], s.Target)
					}
					verdicts(c.Name, s.Right)
				}
			}
		}
		state := map[string]int{} // 1: on the current path, 2: done
		var visit func(c string) bool
		visit = func(c string) bool {
			switch state[c] {
			case 1:
				return true
			case 2:
				return false
			}
			state[c] = 1
			for _, t := range targets[c] {
				if visit(t) {
					return true
				}
			}
			state[c] = 2
			return false
		}
		for _, c := range tb.Chains {
			if visit(c.Name) {
				return true
			}
		}
	}
	return false
}
