package iptables

import (
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
	"github.com/k8sguide/k8sguide/dataplanes/netstate"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// maxParseInput bounds what one exec of FuzzParse parses. Every exec costs about a millisecond (three
// parses, a walk), more for a bigger input; the fuzzer minimizes every new interesting input by trying it
// with bytes taken out, one by one and then every span (quadratic in its length), so one input grown from
// the 2–5.5 KB real dumps kept both workers busy for the whole 60 s minimize time and the run stopped at its
// baseline. A bigger input is passed over at once: it costs nothing, and being all alike to the coverage,
// none of them is kept or minimized. The whole dumps are parsed and walked by the unit tests (walk_test's
// TestNodePortFromClientCapturedLab and TestSeed*); here they are seeded in cuts.
const maxParseInput = 2 << 10

// FuzzParse feeds arbitrary text to both parsers, and to the reader of pasted dumps (several outputs after their
// `$ COMMAND` lines: iptables-save, -S, -L), and walks whatever they accept: no input may panic, and a walk
// whose outcome is unknown must say what is missing.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"iptables-worker.save", "seed001-nodeport.save", "seed000-nodeport.listing", "seed004-clusterip.listing"} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		if len(b) <= maxParseInput {
			f.Add(string(b))
		}
		for _, c := range cuts(string(b), maxParseInput*3/4) {
			f.Add(c)
		}
	}
	f.Add("*nat\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -j X\n-A X -j PREROUTING\nCOMMIT\n")
	f.Add("-A KUBE-SVC-X -m statistic --mode random --probability 2 -j KUBE-SEP-Y \"")
	f.Add("$ iptables -t nat -S\n-P PREROUTING ACCEPT\n-N A\n-A PREROUTING -j A\n-I A 2 -j DNAT --to-destination 10.0.0.1:80\n$ iptables -L -n\nChain FORWARD (policy DROP)\ntarget prot opt source destination\nACCEPT all -- anywhere localhost tcp dpt:http")
	f.Add("$ ipt KUBE-SERVICES | grep X\n    1    60 KUBE-NODEPORTS  all  --  *      *       0.0.0.0/0            0.0.0.0/0\n*nat\n:A - [0:0]\n-X A\n-F B\n-A A -j")
	n := netstate.FromLocalAddresses([]netip.Addr{netip.MustParseAddr("172.18.0.3")})
	flow := trace.Flow{Src: netip.MustParseAddr("172.18.0.1"), Dst: netip.MustParseAddr("172.18.0.3"), Dport: 30080, Proto: "tcp"}
	f.Fuzz(func(t *testing.T, text string) {
		if len(text) > maxParseInput {
			return
		}
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

// cuts cuts a real dump into smaller real ones, each under budget bytes, its lines unchanged and in their
// order. An iptables-save: per table and per built-in chain, the chains it reaches by -j and -g, taken
// breadth-first while their rules fit (a chain that does not fit stays declared, empty, as a chain cut
// short); a table with no rules whole. A paste of commands: its outputs (from one `$` line to the next)
// packed in order. Anything else (a grep of a save): its lines packed in order.
func cuts(text string, budget int) []string {
	lines := strings.SplitAfter(text, "\n")
	pack := func(parts []string) []string {
		var out []string
		cur := ""
		for _, p := range parts {
			if cur != "" && len(cur)+len(p) > budget {
				out = append(out, cur)
				cur = ""
			}
			cur += p
		}
		return append(out, cur)
	}
	if strings.HasPrefix(text, "$ ") {
		var outputs []string
		for _, l := range lines {
			if strings.HasPrefix(l, "$ ") || len(outputs) == 0 {
				outputs = append(outputs, "")
			}
			outputs[len(outputs)-1] += l
		}
		return pack(outputs)
	}
	if !strings.Contains(text, "\nCOMMIT") {
		return pack(lines)
	}
	var out []string
	for start := 0; start < len(lines); start++ {
		if !strings.HasPrefix(lines[start], "*") {
			continue
		}
		end := start
		for end < len(lines) && strings.TrimSpace(lines[end]) != "COMMIT" {
			end++
		}
		decl, rules, targets := map[string]int{}, map[string][]int{}, map[int][]string{}
		var builtins []string
		for i := start + 1; i < end; i++ {
			f := strings.Fields(lines[i])
			if strings.HasPrefix(lines[i], ":") && len(f) >= 2 {
				decl[f[0][1:]] = i
				if f[1] != "-" {
					builtins = append(builtins, f[0][1:])
				}
			}
			for k := 0; k+1 < len(f); k++ {
				switch f[k] {
				case "-A":
					rules[f[k+1]] = append(rules[f[k+1]], i)
				case "-j", "-g":
					targets[i] = append(targets[i], f[k+1])
				}
			}
		}
		if len(rules) == 0 {
			out = append(out, strings.Join(lines[start:end+1], ""))
		}
		for _, b := range builtins {
			if len(rules[b]) == 0 {
				continue
			}
			keep := map[int]bool{start: true, end: true}
			size := func(add []int) int {
				n := 0
				for i := range keep {
					n += len(lines[i])
				}
				for _, i := range add {
					if !keep[i] {
						n += len(lines[i])
					}
				}
				return n
			}
			queue, seen := []string{b}, map[string]bool{b: true}
			for len(queue) > 0 {
				c := queue[0]
				queue = queue[1:]
				add := append([]int{decl[c]}, rules[c]...)
				var next []string
				for _, r := range rules[c] {
					for _, t := range targets[r] {
						if d, ok := decl[t]; ok {
							add = append(add, d)
							next = append(next, t)
						}
					}
				}
				if size(add) > budget {
					keep[decl[c]] = true
					continue
				}
				for _, i := range add {
					keep[i] = true
				}
				for _, t := range next {
					if !seen[t] {
						seen[t] = true
						queue = append(queue, t)
					}
				}
			}
			var b strings.Builder
			for i := start; i <= end; i++ {
				if keep[i] {
					b.WriteString(lines[i])
				}
			}
			out = append(out, b.String())
		}
		start = end
	}
	return out
}
