package nftables

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
	"github.com/k8sguide/k8sguide/dataplanes/netstate"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// maxRulesetInput bounds what one exec of FuzzParseRuleset parses (JSON and text together). The real
// rulesets are 3–72 KB and cost 0.2–3.4 ms an exec (parse and three walks); the fuzzer minimizes every new
// interesting input by trying it with bytes taken out, one by one and then every span (quadratic in its
// length), so one input grown from a 20–55 KB seed kept both workers busy for the whole 60 s minimize time
// and the run stopped at its baseline. A bigger input is passed over at once: it costs nothing, and being
// all alike to the coverage, none of them is kept or minimized. Whole rulesets are parsed and walked by the
// unit tests (render_test, text_test, kernel_test, walk_test); here they are seeded in cuts (rulesetCuts).
const maxRulesetInput = 4 << 10

// maxTextInput bounds one exec of FuzzParseText and FuzzTransaction, for the same reason: seeded with the
// whole 4–17 KB fixtures, both workers spent the run minimizing two inputs grown from them (fuzzdebug: one
// still minimizing when the 40 s run ended) and the run stalled at 0 execs/s from its 12th second. The
// fixtures are seeded in cuts under this size (textCuts, transactionCuts); the unit tests parse them whole.
const maxTextInput = 2 << 10

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
		if len(data)+len(text) <= maxRulesetInput {
			f.Add(data, string(text))
		}
		cuts, err := rulesetCuts(data, string(text), maxRulesetInput)
		if err != nil {
			f.Fatalf("%s: %v", js, err)
		}
		for _, c := range cuts {
			f.Add(c.data, c.text)
		}
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
		if len(data)+len(text) > maxRulesetInput {
			return
		}
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
		for _, c := range textCuts(string(text), maxTextInput) {
			f.Add(c)
			f.Add(c[:len(c)*2/3]) // a paste cut off: inside a rule, a chain, a set's elements
		}
	}
	f.Add("table ip t {\n\tchain c {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t\tip daddr . tcp dport vmap { 1.1.1.1 . 80 : goto d }\n\t}\n\tchain d {\n\t\tdnat to 10.0.0.1:80\n\t}\n}\n")
	f.Add("table ip t {\n\tset s {\n\t\ttype ipv4_addr\n\t\tflags interval\n\t\telements = { 10.0.0.0/8, 1.1.1.1-1.1.1.9 }\n\t}\n}\n")
	f.Add("\tchain c {\n\t\tip daddr 1.1.1.1 jump d\n\t}\n}\n")
	state := nodeState(f, "nftables-worker")
	flows := []fuzzFlow{
		{"172.18.0.1:40002", "172.18.0.3:30696", netfilter.Origin{Iif: "eth0"}},
		{"10.244.1.2", "10.96.227.102:80", netfilter.Origin{Iif: "cni0"}},
	}
	f.Fuzz(func(t *testing.T, text string) {
		if len(text) > maxTextInput {
			return
		}
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
		if loop := rs.checkLoops() != nil; loop != hasChainLoop(rs) {
			t.Fatalf("checkLoops says %v, hasChainLoop %v", loop, !loop)
		}
		// Broken text makes loops easily (a lost "}" merges two chains): the kernel refuses such a ruleset,
		// and the walk stops one itself, at once (it used to take seconds, so they were skipped here).
		rs.Leave(nil)
		rs.pasted = true // and the stand-ins for what a paste may lack
		walkAll(t, rs, state, flows)
	})
}

type fuzzFlow struct {
	src, dst string
	o        netfilter.Origin
}

// walkAll walks every flow through rs and fails on a walk that broke (the walk recovers, and says so).
func walkAll(t *testing.T, rs *Ruleset, state *netstate.State, flows []fuzzFlow) {
	for _, fl := range flows {
		pkt := trace.Packet{Src: fl.src, Dst: fl.dst, Proto: "tcp"}
		flow, err := pkt.ParseFlow()
		if err != nil {
			t.Fatal(err)
		}
		paths, notes, _ := netfilter.Run([]netfilter.Ruleset{rs}, state, flow, fl.o, nil)
		for _, n := range notes {
			if strings.Contains(n, "tracer failed") {
				t.Fatal(n)
			}
		}
		for _, p := range paths {
			for _, m := range p.Missing {
				if strings.Contains(m, "walk failed") {
					t.Fatal(m)
				}
			}
		}
	}
}

// FuzzTransaction: no nft -f script makes ParseTransaction panic (a recovered panic is reported here as a
// failure); what it returns holds together after its deletes (every chain and set in its table's index, rule
// texts parts of the input), Sniff takes it without panicking, and it can be walked.
func FuzzTransaction(f *testing.F) {
	tx, err := os.ReadFile("testdata/corpus/02-k8s-v133-nftables-transaction-overall.txt")
	if err != nil {
		f.Fatal(err)
	}
	for _, c := range transactionCuts(string(tx), maxTextInput) {
		f.Add(c)
		f.Add(c[:len(c)/2])
	}
	for _, s := range []string{
		"add table ip t\nadd chain ip t c { type nat hook prerouting priority -100 ; }\nadd rule ip t c ip daddr 10.0.0.1 dnat to 10.0.0.2:80\n",
		"add table ip t\nadd chain ip t c\nadd rule ip t c accept\ninsert rule ip t c index 0 drop\ndelete rule ip t c handle 3\nflush chain ip t c\ndelete chain ip t c\n",
		"add map ip t m { type ipv4_addr . inet_proto . inet_service : verdict ; comment \"x\" ; }\nadd element ip t m { 1.1.1.1 . tcp . 80 comment \"a\" : goto c }\ndelete element ip t m { 1.1.1.1 . tcp . 80 }\n",
		"add set ip t s { type ipv4_addr ; flags dynamic,timeout ; timeout 10800s ; elements = { 1.1.1.1 } ; }\nflush set ip t s\ndestroy table ip t\nflush ruleset\n",
		"create table inet f ; add chain inet f c { type filter hook input priority 0 ; policy drop ; }\nreplace rule inet f c handle 1 accept\ntable ip x {\n\tchain y {\n\t}\n}\n",
	} {
		f.Add(s)
	}
	state := nodeState(f, "nftables-worker")
	flows := []fuzzFlow{
		{"172.18.0.1:40002", "172.18.0.3:30696", netfilter.Origin{Iif: "eth0"}},
		{"10.244.1.2", "10.96.227.102:80", netfilter.Origin{FromNode: true}},
	}
	f.Fuzz(func(t *testing.T, text string) {
		if len(text) > maxTextInput {
			return
		}
		if _, _, err := (Engine{}).Sniff(text); err != nil && strings.Contains(err.Error(), "internal error") {
			t.Fatal(err)
		}
		rs, err := ParseTransaction(text)
		if err != nil {
			if strings.Contains(err.Error(), "internal error") {
				t.Fatal(err)
			}
			return
		}
		for _, tb := range rs.Tables {
			if rs.Table(tb.Family, tb.Name) != tb {
				t.Fatalf("table %s %s is not the ruleset's", tb.Family, tb.Name)
			}
			for _, c := range tb.Chains {
				if tb.Chain(c.Name) != c {
					t.Fatalf("chain %q is not in the table's index", c.Name)
				}
				for _, r := range c.Rules {
					if !strings.Contains(text, r.Text) {
						t.Fatalf("rule text %q is not in the input", r.Text)
					}
					_ = RenderRule(r)
				}
			}
			for _, s := range tb.Sets {
				if tb.Set(s.Name) != s {
					t.Fatalf("set %q is not in the table's index", s.Name)
				}
			}
		}
		rs.Leave(nil)
		rs.pasted = true
		walkAll(t, rs, state, flows) // loops too: the walk stops them itself

	})
}

// hasChainLoop says whether a chain of rs can reach itself by jumps and gotos (of rules and verdict maps),
// written apart from checkLoops as the fuzz test's second opinion.
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
					if s.Kind == SVmap { // only a vmap statement jumps: a verdict in a match's map is data
						verdicts(c.Name, s.Right)
					}
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

type rulesetCut struct {
	data []byte
	text string
}

var (
	nftTarget = regexp.MustCompile(`"(?:jump|goto)": \{"target": "([^"]+)"\}`)
	nftBlock  = regexp.MustCompile(`^\t([a-z]+(?: [a-z]+)?) (\S+) \{`)
)

// rulesetCuts cuts a real ruleset (`nft -j list ruleset` and `nft -a list ruleset`) into smaller real ones,
// each under budget bytes: per table and per base chain, the chains it reaches by jumps, gotos and verdict
// maps, taken breadth-first while they fit, with the sets and maps their rules name. Every object and every
// line is the fixture's own, unchanged and in its order; a chain that did not fit is kept without its rules
// (so the walk finds it empty, as a chain cut short), nothing is made up.
func rulesetCuts(data []byte, text string, budget int) ([]rulesetCut, error) {
	var top struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, err
	}
	type item struct {
		kind, table, name, chain, hook string
		raw                            []byte
	}
	var items []item
	for _, obj := range top.Nftables {
		for kind, raw := range obj {
			var o struct{ Family, Table, Name, Chain, Hook string }
			if err := json.Unmarshal(raw, &o); err != nil {
				return nil, err
			}
			it := item{kind: kind, table: o.Family + " " + o.Table, name: o.Name, chain: o.Chain, hook: o.Hook}
			if kind == "table" {
				it.table = o.Family + " " + o.Name
			}
			it.raw = []byte(`{"` + kind + `": ` + string(raw) + `}`) // as nft wrote it (json.Marshal would compact it)
			items = append(items, it)
		}
	}
	var cuts []rulesetCut
	for _, tb := range items {
		if tb.kind != "table" {
			continue
		}
		for _, base := range items {
			if base.kind != "chain" || base.table != tb.table || base.hook == "" {
				continue
			}
			keep := map[int]bool{}
			for i, it := range items {
				if it.kind == "metainfo" || (it.kind == "table" && it.table == tb.table) {
					keep[i] = true
				}
			}
			size := func() int {
				n := 0
				for i := range keep {
					n += len(items[i].raw) * 7 / 5 // the text of an object is about 40 % of its JSON: leave it room
				}
				return n
			}
			// chain adds a chain (its object, and its rules when they fit) and says where its rules go.
			chain := func(name string, rules bool) []string {
				var targets []string
				add := map[int]bool{}
				for i, it := range items {
					if it.table != tb.table {
						continue
					}
					if it.kind == "chain" && it.name == name || rules && it.kind == "rule" && it.chain == name {
						add[i] = true
					}
				}
				for i := range add {
					if items[i].kind != "rule" {
						continue
					}
					for j, it := range items { // the sets and maps the rule names, and where their verdicts go
						if it.table == tb.table && it.kind != "rule" && it.kind != "chain" && it.kind != "table" &&
							(strings.Contains(string(items[i].raw), `"@`+it.name+`"`) || strings.Contains(string(items[i].raw), `": "`+it.name+`"}`)) {
							add[j] = true
						}
					}
				}
				for i := range add {
					if items[i].kind != "chain" {
						for _, m := range nftTarget.FindAllStringSubmatch(string(items[i].raw), -1) {
							targets = append(targets, m[1])
						}
					}
				}
				n := 0
				for i := range add {
					if !keep[i] {
						n += len(items[i].raw) * 7 / 5
					}
				}
				if rules && size()+n > budget {
					return nil
				}
				for i := range add {
					keep[i] = true
				}
				return targets
			}
			queue, seen := []string{base.name}, map[string]bool{base.name: true}
			for len(queue) > 0 {
				name := queue[0]
				queue = queue[1:]
				targets := chain(name, true)
				if targets == nil {
					chain(name, false)
				}
				for _, t := range targets {
					if !seen[t] {
						seen[t] = true
						queue = append(queue, t)
					}
				}
			}
			var c rulesetCut
			var raws []string
			kept := map[string]bool{} // "table kind name" of the objects kept, for the text
			for i, it := range items {
				if keep[i] {
					raws = append(raws, string(it.raw))
					if it.kind != "rule" {
						kept[it.table+" "+it.kind+" "+it.name] = true
					}
				}
			}
			c.data = []byte(`{"nftables": [` + strings.Join(raws, ", ") + `]}`)
			c.text = cutText(text, kept)
			if len(c.data)+len(c.text) <= maxRulesetInput {
				cuts = append(cuts, c)
			}
		}
	}
	return cuts, nil
}

// cutText keeps, of an `nft -a list ruleset` text, the lines of the tables and of the blocks (chains, sets,
// maps) that kept names ("family table kind name"), unchanged and in their order.
func cutText(text string, kept map[string]bool) string {
	var b strings.Builder
	table, tableKept, in, keepBlock := "", false, false, false
	for _, line := range strings.SplitAfter(text, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "table" && !strings.HasPrefix(line, "\t"):
			table, in = f[1]+" "+f[2], false
			tableKept = kept[table+" table "+f[2]]
		case table == "":
			continue
		case line == "}\n" || line == "}":
			table = ""
		case in:
			in = !(line == "\t}\n" || line == "\t}")
			if keepBlock {
				b.WriteString(line)
			}
			continue
		case nftBlock.MatchString(line):
			m := nftBlock.FindStringSubmatch(line)
			in, keepBlock = true, kept[table+" "+m[1]+" "+m[2]]
			if keepBlock {
				b.WriteString(line)
			}
			continue
		case strings.TrimSpace(line) == "":
			continue
		}
		if tableKept {
			b.WriteString(line)
		}
	}
	return b.String()
}

// textCuts cuts an `nft list ruleset` text into smaller real ones, each under budget bytes where a block
// allows: per table, its blocks (chains, sets, maps: from their `\tKIND NAME {` line to their `\t}`) packed
// in order, each cut wrapped in its table's first and last lines. Every line is the fixture's own,
// unchanged and in its order; a chain a cut jumps to but does not hold is missing, as in a partial paste.
func textCuts(text string, budget int) []string {
	var out []string
	var head, cur string
	var block string
	flush := func() {
		if cur != "" {
			out = append(out, head+cur+"}\n")
			cur = ""
		}
	}
	for _, line := range strings.SplitAfter(text, "\n") {
		switch {
		case strings.HasPrefix(line, "table "):
			head, cur, block = line, "", ""
		case head == "":
		case line == "}\n" || line == "}":
			flush()
			head = ""
		default:
			block += line
			if strings.HasPrefix(line, "\t}") || !strings.HasPrefix(line, "\t\t") && !strings.HasSuffix(line, "{\n") {
				if cur != "" && len(head)+len(cur)+len(block)+2 > budget {
					flush()
				}
				if len(head)+len(block)+2 <= budget {
					cur += block
				}
				block = ""
			}
		}
	}
	return out
}

var txName = regexp.MustCompile(`^add (?:chain|map|set) \S+ \S+ (\S+)`)

// transactionCuts cuts an `nft -f` transaction (as kube-proxy writes it) into smaller real ones, each under
// budget bytes: its lines that are not declarations packed in order, each cut after the `add table` lines and
// the declarations (chains, sets, maps) its lines name. Every line is the transaction's own, in its order.
func transactionCuts(tx string, budget int) []string {
	lines := strings.SplitAfter(tx, "\n")
	var tables []string
	decl := map[string]string{}
	var rest []string
	for _, l := range lines {
		switch m := txName.FindStringSubmatch(l); {
		case strings.HasPrefix(l, "add table "):
			tables = append(tables, l)
		case m != nil:
			decl[m[1]] = l
		default:
			rest = append(rest, l)
		}
	}
	build := func(part []string) string {
		out := strings.Join(tables, "")
		for _, l := range lines { // the declarations this part names, in the transaction's order
			if m := txName.FindStringSubmatch(l); m != nil {
				for _, p := range part {
					if slices.Contains(strings.Fields(p), m[1]) || strings.Contains(p, "@"+m[1]) {
						out += l
						break
					}
				}
			}
		}
		return out + strings.Join(part, "")
	}
	var out []string
	var part []string
	for _, l := range rest {
		if len(part) > 0 && len(build(append(slices.Clone(part), l))) > budget {
			out = append(out, build(part))
			part = nil
		}
		part = append(part, l)
	}
	if len(part) > 0 {
		out = append(out, build(part))
	}
	return out
}
