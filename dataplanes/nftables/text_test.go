package nftables

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
)

// textFixtures are the captures with both listings: X.json (`nft -j list ruleset`) and X.nft (`nft -a list
// ruleset`) of the same ruleset.
var textFixtures = []string{"nftables-worker", "nfh1-worker", "nfh1-worker-after-sticky", "nfh1-control-plane",
	"scratch", "semantics", "grammar", "iptables-nft"}

func readFixture(t testing.TB, file string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + file)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var (
	handleComments = regexp.MustCompile(` # handle \d+`)
	counterValues  = regexp.MustCompile(` packets \d+ bytes \d+`)
)

// How a text listing differs from the -a listing the JSON was compared with.
type listing struct {
	handles  bool // it has "# handle N" (else every handle is 0)
	counters bool // it has counter values (else `counter` alone, as -s prints it)
	expires  bool // elements show their expiry (-s leaves it out)
}

var fullListing = listing{handles: true, counters: true, expires: true}

// TestParseTextMatchesJSON: for every capture, ParseText of the text gives the model ParseRuleset gives of
// the JSON (with the text): also without the handles, without the counters' values, and (grammar) for nft's
// -s output.
func TestParseTextMatchesJSON(t *testing.T) {
	for _, name := range textFixtures {
		js := readFixture(t, name+".json")
		text := readFixture(t, name+".nft")
		variants := []struct {
			what string
			text string
			l    listing
		}{
			{"nft -a list ruleset", text, fullListing},
			{"without handles", handleComments.ReplaceAllString(text, ""), listing{counters: true, expires: true}},
			{"without counter values", counterValues.ReplaceAllString(text, ""), listing{handles: true, expires: true}},
		}
		if s, err := os.ReadFile("testdata/" + name + ".stateless.nft"); err == nil {
			variants = append(variants, struct {
				what string
				text string
				l    listing
			}{"nft -a -s list ruleset", string(s), listing{handles: true}})
		}
		for _, v := range variants {
			t.Run(name+"/"+v.what, func(t *testing.T) {
				want, err := ParseRuleset([]byte(js), text)
				if err != nil {
					t.Fatal(err)
				}
				got, err := ParseText(v.text)
				if err != nil {
					t.Fatal(err)
				}
				if len(got.Warnings) != len(want.Warnings) {
					t.Errorf("warnings: text %q, JSON %q", got.Warnings, want.Warnings)
				}
				if d := diffModels(want, got, v.l); len(d) > 0 {
					t.Errorf("ParseText differs from ParseRuleset (%d differences):\n%s", len(d), strings.Join(d, "\n"))
				}
			})
		}
	}
}

// diffModels compares the JSON's model (want) with the text's (got) and lists the differences by path. It
// compares every exported field, strictly (a nil slice is not an empty one), except for what the text
// cannot or need not have:
//   - Version (the text has none), handles and expiries when the listing has none, counter values in Text;
//   - what nft 1.0.6's JSON leaves out (table and chain comments, chain devices, the "dynamic" set flag):
//     the text may have them where the JSON has nothing;
//   - the statements of iptables-nft rules with xt matches or targets, which the text shows translated;
//   - Raw, which is the JSON for ParseRuleset and the printed text for ParseText: a text statement's Raw
//     must be what RenderStmt prints for the JSON's statement, and the Raws with the comment make the
//     rule's Text.
func diffModels(want, got *Ruleset, l listing) []string {
	var out []string
	add := func(format string, args ...any) {
		if len(out) < 40 {
			out = append(out, fmt.Sprintf(format, args...))
		}
	}
	if !reflect.DeepEqual(want.Skip, got.Skip) {
		add("Skip: %v, want %v", got.Skip, want.Skip)
	}
	if len(got.Tables) != len(want.Tables) {
		add("%d tables, want %d", len(got.Tables), len(want.Tables))
		return out
	}
	for ti, wt := range want.Tables {
		gt := got.Tables[ti]
		tp := fmt.Sprintf("table %s %s", wt.Family, wt.Name)
		eq(add, tp+" family/name", gt.Family+" "+gt.Name, wt.Family+" "+wt.Name)
		if l.handles {
			eq(add, tp+" handle", gt.Handle, wt.Handle)
		}
		omitted(add, tp+" comment", gt.Comment, wt.Comment)
		if len(gt.Chains) != len(wt.Chains) {
			add("%s: %d chains, want %d", tp, len(gt.Chains), len(wt.Chains))
			continue
		}
		for ci, wc := range wt.Chains {
			gc := gt.Chains[ci]
			cp := tp + " chain " + wc.Name
			eq(add, cp+" name", gc.Name, wc.Name)
			if l.handles {
				eq(add, cp+" handle", gc.Handle, wc.Handle)
			}
			eq(add, cp+" type/hook/prio/policy", fmt.Sprint(gc.Type, "/", gc.Hook, "/", gc.Prio, "/", gc.Policy),
				fmt.Sprint(wc.Type, "/", wc.Hook, "/", wc.Prio, "/", wc.Policy))
			omitted(add, cp+" device", gc.Device, wc.Device)
			omitted(add, cp+" comment", gc.Comment, wc.Comment)
			if len(gc.Rules) != len(wc.Rules) {
				add("%s: %d rules, want %d", cp, len(gc.Rules), len(wc.Rules))
				continue
			}
			for ri, wr := range wc.Rules {
				gr := gc.Rules[ri]
				rp := fmt.Sprintf("%s rule %d (%s)", cp, ri+1, wr.Text)
				if l.handles {
					eq(add, rp+" handle", gr.Handle, wr.Handle)
				}
				wantText := wr.Text
				if !l.counters {
					wantText = counterValues.ReplaceAllString(wantText, "")
				}
				eq(add, rp+" text", gr.Text, wantText)
				eq(add, rp+" comment", gr.Comment, wr.Comment)
				if hasXt(wr) {
					// iptables-nft: the text has nft's translation of the xt matches and targets it can
					// translate (tcp dport { 1, 2 } for -m multiport; nothing for -m comment), the JSON
					// has {"xt": …}. What nft cannot translate is "xt match NAME" in both.
					for _, s := range gr.Stmts {
						if s.Kind == SXt && !hasXtNamed(wr, s.Name) {
							add("%s: %s, which the JSON does not have", rp, s.Raw)
						}
					}
					continue
				}
				if len(gr.Stmts) != len(wr.Stmts) {
					add("%s: %d statements, want %d", rp, len(gr.Stmts), len(wr.Stmts))
					continue
				}
				var raws []string
				// Where RenderRule prints the JSON's rule as nft does, each statement's text is known.
				rendered := RenderRule(wr) == wr.Text
				for si, ws := range wr.Stmts {
					gs := gr.Stmts[si]
					sp := fmt.Sprintf("%s stmt %d", rp, si+1)
					raws = append(raws, gs.Raw)
					if rendered {
						r := RenderStmt(ws)
						if !l.counters {
							r = counterValues.ReplaceAllString(r, "")
						}
						eq(add, sp+" Raw", gs.Raw, r)
					}
					diffValues(add, sp, reflect.ValueOf(gs).Elem(), reflect.ValueOf(ws).Elem())
				}
				if gr.Comment != "" {
					raws = append(raws, "comment "+fmt.Sprintf("%q", gr.Comment))
				}
				eq(add, rp+" statements' text", strings.Join(raws, " "), gr.Text)
			}
		}
		if len(gt.Sets) != len(wt.Sets) {
			add("%s: %d sets, want %d", tp, len(gt.Sets), len(wt.Sets))
			continue
		}
		for si, ws := range wt.Sets {
			gs := gt.Sets[si]
			sp := tp + " " + ws.Kind() + " " + ws.Name
			if l.handles {
				eq(add, sp+" handle", gs.Handle, ws.Handle)
			}
			eq(add, sp+" name/map/timeout/comment", fmt.Sprint(gs.Name, gs.Map, gs.Timeout, gs.Comment),
				fmt.Sprint(ws.Name, ws.Map, ws.Timeout, ws.Comment))
			diffValues(add, sp+" Type", reflect.ValueOf(gs.Type), reflect.ValueOf(ws.Type))
			diffValues(add, sp+" DataType", reflect.ValueOf(gs.DataType), reflect.ValueOf(ws.DataType))
			flags := gs.Flags
			if hasFlag(flags, "dynamic") && !hasFlag(ws.Flags, "dynamic") {
				// nft 1.0.6's JSON does not print the dynamic flag.
				flags = nil
				for _, f := range gs.Flags {
					if f != "dynamic" {
						flags = append(flags, f)
					}
				}
			}
			diffValues(add, sp+" Flags", reflect.ValueOf(flags), reflect.ValueOf(ws.Flags))
			if len(gs.Elems) != len(ws.Elems) {
				add("%s: %d elements, want %d", sp, len(gs.Elems), len(ws.Elems))
				continue
			}
			for ei := range ws.Elems {
				we, ge := ws.Elems[ei], gs.Elems[ei]
				if !l.expires {
					we.Expires = 0
				}
				diffValues(add, fmt.Sprintf("%s element %d", sp, ei+1), reflect.ValueOf(ge), reflect.ValueOf(we))
			}
		}
	}
	return out
}

func hasXt(r *Rule) bool { return hasXtNamed(r, "") }

func hasXtNamed(r *Rule, name string) bool {
	for _, s := range r.Stmts {
		if s.Kind == SXt && (name == "" || s.Name == name) {
			return true
		}
	}
	return false
}

func eq[T comparable](add func(string, ...any), what string, got, want T) {
	if got != want {
		add("%s: %v, want %v", what, got, want)
	}
}

// omitted compares a field nft 1.0.6's JSON leaves out: the text may have it where the JSON has nothing.
func omitted(add func(string, ...any), what, got, want string) {
	if want != "" && got != want {
		add("%s: %q, want %q", what, got, want)
	}
}

// diffValues compares exported fields recursively; Stmt.Raw and Expr.Raw are left to diffModels (they are
// JSON on one side, text on the other).
func diffValues(add func(string, ...any), path string, got, want reflect.Value) {
	switch want.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map:
		if got.IsNil() != want.IsNil() {
			add("%s: %s, want %s", path, show(got), show(want))
			return
		}
		if want.IsNil() {
			return
		}
	}
	switch want.Kind() {
	case reflect.Pointer:
		diffValues(add, path, got.Elem(), want.Elem())
	case reflect.Struct:
		for i := 0; i < want.NumField(); i++ {
			f := want.Type().Field(i)
			if !f.IsExported() || f.Name == "Raw" {
				continue
			}
			diffValues(add, path+"."+f.Name, got.Field(i), want.Field(i))
		}
	case reflect.Slice:
		if got.Len() != want.Len() {
			add("%s: %s, want %s", path, show(got), show(want))
			return
		}
		for i := 0; i < want.Len(); i++ {
			diffValues(add, fmt.Sprintf("%s[%d]", path, i), got.Index(i), want.Index(i))
		}
	default:
		if !reflect.DeepEqual(got.Interface(), want.Interface()) {
			add("%s: %s, want %s", path, show(got), show(want))
		}
	}
}

func show(v reflect.Value) string {
	if v.Kind() == reflect.Pointer && !v.IsNil() {
		if e, ok := v.Interface().(*Expr); ok {
			return fmt.Sprintf("%s (%+v)", renderExpr(e, tOther), *e)
		}
		return fmt.Sprintf("%+v", v.Elem().Interface())
	}
	if v.Kind() == reflect.Slice && v.IsNil() {
		return "nil"
	}
	return fmt.Sprintf("%#v", v.Interface())
}

// TestParseTextKeepsWhatJSONOmits: what nft 1.0.6's JSON leaves out is in the text, and ParseText keeps it.
func TestParseTextKeepsWhatJSONOmits(t *testing.T) {
	rs, err := ParseText(readFixture(t, "grammar.nft"))
	if err != nil {
		t.Fatal(err)
	}
	if tb := rs.Table("inet", "g46"); tb == nil || tb.Comment != "inet table" || tb.Chain("ing").Device != "lo" {
		t.Errorf("inet g46: %+v", tb)
	}
	if c := rs.Table("ip", "g1").Chain("svc"); c == nil || c.Comment != "a chain comment" {
		t.Errorf("chain comment: %+v", c)
	}
	if s := rs.Table("ip", "g1").Set("s4"); s == nil || !reflect.DeepEqual(s.Flags, []string{"timeout", "dynamic"}) {
		t.Errorf("set flags: %+v", s)
	}
	if rs.Version != "" || len(rs.Warnings) != 0 {
		t.Errorf("version %q, warnings %q", rs.Version, rs.Warnings)
	}
}

// TestParseTextIptablesNFT: rules iptables-nft made list with nft's translation of their xt matches, which
// ParseText reads as any other rule; what nft cannot translate is an xt statement, as in the JSON.
func TestParseTextIptablesNFT(t *testing.T) {
	rs, err := ParseText(readFixture(t, "iptables-nft.nft"))
	if err != nil || len(rs.Warnings) != 0 {
		t.Fatal(err, rs.Warnings)
	}
	fw := rs.Table("ip", "filter").Chain("FORWARD").Rules
	if s := fw[0].Stmts[0]; s.Kind != SMatch || s.Left.Key != "state" || s.Op != "in" {
		t.Errorf("-m conntrack: %+v", s)
	}
	if s := fw[1].Stmts[0]; s.Kind != SXt || s.Name != "match physdev" {
		t.Errorf("-m physdev: %+v", s)
	}
	// -m comment prints as nothing (the rule's line starts with a blank).
	if r := rs.Table("ip", "filter").Chain("INPUT").Rules[0]; r.Text != "counter packets 0 bytes 0 accept" || len(r.Stmts) != 2 {
		t.Errorf("-m comment: %+v", r)
	}
}

// TestParseTextPriorities: nft prints standard priorities by name, with an offset.
func TestParseTextPriorities(t *testing.T) {
	for _, c := range []struct {
		family, prio string
		want         int
	}{
		{"ip", "dstnat", -100}, {"ip", "raw - 5", -305}, {"ip", "filter + 10", 10}, {"ip", "-100", -100},
		{"ip", "mangle", -150}, {"ip", "security", 50}, {"ip", "srcnat - 1", 99}, {"inet", "filter", 0},
		{"netdev", "filter - 5", -5}, {"bridge", "dstnat", -300}, {"bridge", "filter", -200}, {"bridge", "out", 100},
		{"bridge", "srcnat + 2", 302}, {"arp", "filter", 0},
	} {
		text := fmt.Sprintf("table %s t {\n\tchain c {\n\t\ttype filter hook input priority %s; policy drop;\n\t}\n}\n", c.family, c.prio)
		rs, err := ParseText(text)
		if err != nil {
			t.Fatal(err)
		}
		ch := rs.Table(c.family, "t").Chain("c")
		if ch.Prio != c.want || ch.Policy != "drop" || ch.Hook != "input" || ch.Type != "filter" || len(rs.Warnings) != 0 {
			t.Errorf("%s priority %s: %+v, warnings %q", c.family, c.prio, ch, rs.Warnings)
		}
	}
	rs, err := ParseText("table ip t {\n\tchain c {\n\t\ttype filter hook input priority nonsense; policy drop;\n\t}\n}\n")
	if err != nil || len(rs.Warnings) != 1 {
		t.Errorf("unknown priority name: err %v, warnings %q", err, rs.Warnings)
	}
}

// TestParseTextUnknown: what the model does not know becomes an unknown statement (with a warning when
// the text was not understood at all), never a dropped rule or a panic; the known statements around it are
// kept, and the walk says it assumed the unknown one.
func TestParseTextUnknown(t *testing.T) {
	text := `table ip t {
	chain c {
		type filter hook prerouting priority filter; policy accept;
		frobnicate the packet 3 { a, b } accept comment "x"
		ip saddr 1.2.3.4 weird-thing 5 drop
		ct count over 2 drop
		dup to 1.2.3.4 device "lo"
		meta l4proto tcp tproxy to :80
		rt mtu 1400 accept
		tcp option maxseg size 1400 accept
		add @m { ip saddr : 0x1 }
		ip saddr {
		accept # not a handle # handle 77
	}
}
`
	rs, err := ParseText(text)
	if err != nil {
		t.Fatal(err)
	}
	rules := rs.Table("ip", "t").Chain("c").Rules
	if len(rules) != 10 {
		t.Fatalf("%d rules", len(rules))
	}
	want := []struct {
		kinds, unknown string // statement kinds; the unknown statement's name and text
	}{
		{"unknown,verdict", "frobnicate: frobnicate the packet 3 { a, b }"},
		{"match,unknown,verdict", "weird-thing: weird-thing 5"},
		{"unknown,verdict", "ct count: ct count over 2"},
		{"unknown", `dup: dup to 1.2.3.4 device "lo"`},
		{"match,unknown", "tproxy: tproxy to :80"},
		{"match,verdict", ""},
		{"match,verdict", ""},
		{"unknown", "map: add @m { ip saddr : 0x1 }"},
		{"unknown", "ip: ip saddr {"},
	}
	for i, w := range want {
		r := rules[i]
		var kinds []string
		unknown := ""
		for _, s := range r.Stmts {
			kinds = append(kinds, s.Kind)
			if s.Kind == SUnknown {
				unknown = s.Name + ": " + s.Raw
			}
		}
		if strings.Join(kinds, ",") != w.kinds || unknown != w.unknown {
			t.Errorf("rule %d %q: %s %q, want %s %q", i+1, r.Text, strings.Join(kinds, ","), unknown, w.kinds, w.unknown)
		}
	}
	if rules[0].Comment != "x" || rules[0].Stmts[1].Verdict != "accept" {
		t.Errorf("rule 1: %+v", rules[0])
	}
	// Text before the last "# handle " is the rule's, as ParseRuleset takes it.
	if r := rules[9]; r.Handle != 77 || r.Text != "accept # not a handle" || len(r.Stmts) != 1 {
		t.Errorf("rule 10: %+v", r)
	}
	if m := rules[5].Stmts[0]; m.Left.Kind != KUnknown || m.Left.Raw != "rt mtu" || m.Right.Num != 1400 {
		t.Errorf("rt mtu: %+v %+v", m.Left, m.Right)
	}
	if m := rules[6].Stmts[0]; m.Left.Kind != KUnknown || m.Left.Raw != "tcp option maxseg size" {
		t.Errorf("tcp option: %+v", m.Left)
	}
	// Only what was not understood at all warns: frobnicate, weird-thing, the unfinished set.
	if len(rs.Warnings) != 3 {
		t.Errorf("warnings %q", rs.Warnings)
	}
	rs.Leave(nil)
	tr := walkFlow(t, rs, nodeState(t, "nftables-worker"), "1.2.3.4", "172.18.0.3:80", "tcp", netfilter.Origin{Iif: "eth0"})
	if !hasNote(tr, "the trace assumed `frobnicate the packet 3 { a, b }` matches") {
		t.Errorf("notes %q", tr.Notes)
	}
}

// TestParseTextErrors: input that is not a listing is an error; broken listings give warnings, not panics.
func TestParseTextErrors(t *testing.T) {
	// "chain c {\n}\n" is no longer here: a listing that starts inside a table is a fragment (TestParseTextFragment).
	for _, in := range []string{`{"nftables": []}`, "chain c\n}\n", "hello"} {
		if _, err := ParseText(in); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
	for _, in := range []string{"", "\n\n", "# a comment\n"} {
		if rs, err := ParseText(in); err != nil || len(rs.Tables) != 0 {
			t.Errorf("%q: %v %+v", in, err, rs)
		}
	}
	for _, in := range []string{
		"table ip t {\n\tchain c {\n\t\taccept\n",                                            // unterminated
		"table ip t {\n\tset s {\n\t\ttype ipv4_addr\n\t\telements = { 1.1.1.1, ,\n\t}\n}\n", // broken element
		"table ip t {\n\tchain c {\n\t\tip saddr { 1.1.1.1 accept\n\t}\n}\n",                 // unbalanced braces
		"table ip t {\n\tchain c {\n\t}\n\tchain c {\n\t}\n}\ntable ip t {\n}\n",             // duplicates
		"table ip {\n}\ntable\n",
		"table ip t # handle 1\n\tset s {\n\t\ttype ipv4_addr\n\t}\n}\n", // no { after the table: its } is stray (found by fuzzing)
		"table ip t {\n\tmap m {\n\t\ttype ipv4_addr : verdict\n\t\telements = { 1.1.1.1 }\n\t}\n}\n",
	} {
		rs, err := ParseText(in)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		if len(rs.Warnings) == 0 {
			t.Errorf("%q: no warning", in)
		}
	}
	// A broken element list does not end the set early: what follows it is still read.
	rs, _ := ParseText("table ip t {\n\tset s {\n\t\ttype ipv4_addr\n\t\telements = { 1.1.1.1, ,\n\t\t\t     2.2.2.2 }\n\t}\n\tchain c {\n\t\taccept\n\t}\n}\n")
	if tb := rs.Table("ip", "t"); tb == nil || tb.Chain("c") == nil || len(tb.Set("s").Elems) != 1 {
		t.Errorf("after a broken element list: %+v", tb)
	}
}

// TestServiceWithoutEndpointsEditedText: TestServiceWithoutEndpointsEdited, editing the text listing.
func TestServiceWithoutEndpointsEditedText(t *testing.T) {
	b := readFixture(t, "nftables-worker.nft")
	s := strings.Replace(b, "\t\tcomment \"vmap to drop or reject packets to services with no endpoints\"\n",
		"\t\tcomment \"vmap to drop or reject packets to services with no endpoints\"\n\t\telements = { 10.96.0.77 . tcp . 80 comment \"default/gone:http\" : goto reject-chain }\n", 1)
	s = strings.Replace(s, "elements = { 10.96.227.102 }", "elements = { 10.96.227.102, 10.96.0.77 }", 1)
	if strings.Count(s, "10.96.0.77") != 2 {
		t.Fatal("fixture changed: no-endpoint-services or cluster-ips not found")
	}
	rs, err := ParseText(s)
	if err != nil {
		t.Fatal(err)
	}
	checkRejectsGone(t, rs)
}

// TestFixtureTestsFromText runs the tests that walk the captures again on rulesets ParseText makes from the
// captures' text alone, so the traces of text are checked against the same kernel captures (loadFixture
// reads fixtureFromText; none of these tests runs in parallel).
func TestFixtureTestsFromText(t *testing.T) {
	fixtureFromText = true
	defer func() { fixtureFromText = false }()
	if rs := loadFixture(t, "nfh1-worker", true); rs.Version != "" {
		t.Fatal("loadFixture did not use ParseText") // only the JSON has a version
	}
	for _, c := range []struct {
		name string
		test func(*testing.T)
	}{
		{"KernelTraceAgreement", TestKernelTraceAgreement},
		{"ParseAffinityAndComments", TestParseAffinityAndComments},
		{"SemanticsJumpsMarksRandom", TestSemanticsJumpsMarksRandom},
		{"SemanticsUnknownSourcePort", TestSemanticsUnknownSourcePort},
		{"SemanticsDropAndPolicy", TestSemanticsDropAndPolicy},
		{"SemanticsRedirect", TestSemanticsRedirect},
		{"NodePortFromClient", TestNodePortFromClient},
		{"NodePortUnknownSourcePort", TestNodePortUnknownSourcePort},
		{"ClusterIPFromPod", TestClusterIPFromPod},
		{"NodePortLocalhostFromNode", TestNodePortLocalhostFromNode},
		{"NodePortOtherNodeAddress", TestNodePortOtherNodeAddress},
		{"PortWithoutService", TestPortWithoutService},
		{"ClusterIPWrongPort", TestClusterIPWrongPort},
		{"ServiceWithoutEndpoints", TestServiceWithoutEndpoints},
		{"ExternalTrafficPolicyLocal", TestExternalTrafficPolicyLocal},
		{"SessionAffinity", TestSessionAffinity},
		{"Skip", TestSkip},
		{"ConcurrentWalks", TestConcurrentWalks},
	} {
		t.Run(c.name, c.test)
	}
}

// TestParseTextBigRuleset compares ParseText and ParseRuleset on a real node's listings, when given:
// K8SGUIDE_BIG_NFT_TEXT (`nft list ruleset`, with or without -a) and K8SGUIDE_BIG_NFT_JSON (`nft -j list
// ruleset`) of the same ruleset, such as the lab node with 5,000 NodePort Services:
//
//	ip netns exec bmn-control-plane nft list ruleset > /tmp/bmn.nft
//	ip netns exec bmn-control-plane nft -j list ruleset > /tmp/bmn.json
//	K8SGUIDE_BIG_NFT_TEXT=/tmp/bmn.nft K8SGUIDE_BIG_NFT_JSON=/tmp/bmn.json go test -run BigRuleset -v ./dataplanes/nftables/
//
// It also reports the time and the heap ParseText takes.
func TestParseTextBigRuleset(t *testing.T) {
	textFile, jsonFile := os.Getenv("K8SGUIDE_BIG_NFT_TEXT"), os.Getenv("K8SGUIDE_BIG_NFT_JSON")
	if textFile == "" || jsonFile == "" {
		t.Skip("K8SGUIDE_BIG_NFT_TEXT and K8SGUIDE_BIG_NFT_JSON name the listings of a big ruleset; not set")
	}
	tb, err := os.ReadFile(textFile)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := os.ReadFile(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	text := string(tb)
	start := time.Now()
	got, err := ParseText(text)
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ParseText of %d bytes: %v", len(text), elapsed)
	want, err := ParseRuleset(jb, text)
	if err != nil {
		t.Fatal(err)
	}
	l := listing{handles: strings.Contains(text, "# handle "), counters: true, expires: true}
	if d := diffModels(want, got, l); len(d) > 0 {
		t.Errorf("ParseText differs from ParseRuleset (first %d differences):\n%s", len(d), strings.Join(d, "\n"))
	}
	if len(got.Warnings) != len(want.Warnings) {
		t.Errorf("warnings: text %q, JSON %q", got.Warnings, want.Warnings)
	}
	heap := peakHeap(func() {
		if _, err := ParseText(text); err != nil {
			t.Error(err)
		}
	})
	t.Logf("ParseText peak heap %.1f MB (input %.1f MB)", float64(heap)/(1<<20), float64(len(text))/(1<<20))
}

// peakHeap runs f and returns the most heap in use while it ran, over the heap in use before (sampled
// every millisecond, and at the end).
func peakHeap(f func()) uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	base := m.HeapAlloc
	var peak uint64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var s runtime.MemStats
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
				runtime.ReadMemStats(&s)
				peak = max(peak, s.HeapAlloc)
			}
		}
	}()
	f()
	runtime.ReadMemStats(&m)
	close(done)
	<-sampled
	peak = max(peak, m.HeapAlloc)
	return peak - min(base, peak)
}
