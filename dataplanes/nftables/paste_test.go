package nftables

import (
	"encoding/json"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
	"github.com/k8sguide/k8sguide/dataplanes/netstate"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// traceDump traces a packet through a pasted dump as `trace --snapshot` does: Sniff, Open (as for a paste: no
// node), the walk on a node that owns local, and Opened.Missing applied to ends nothing translated.
func traceDump(t *testing.T, dump, src, dst, proto string, fromNode bool, local ...string) (*trace.Trace, dataplanes.Sniffed) {
	t.Helper()
	sn, ok, err := Engine{}.Sniff(dump)
	if !ok || err != nil {
		t.Fatalf("sniff: ok %v, err %v", ok, err)
	}
	op, err := Engine{}.Open(sn.Part, dataplanes.OpenOptions{})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	var addrs []netip.Addr
	for _, a := range local {
		addrs = append(addrs, netip.MustParseAddr(a))
	}
	st := netstate.FromLocalAddresses(addrs)
	pkt := trace.Packet{Src: src, Dst: dst, Proto: proto}
	flow, err := pkt.ParseFlow()
	if err != nil {
		t.Fatal(err)
	}
	origin := netfilter.Origin{FromNode: fromNode}
	if !fromNode {
		origin.Iif = "eth0"
	}
	paths, notes, ct := netfilter.Run(op.Rulesets, &st, flow, origin, nil)
	for i, p := range paths {
		if len(op.Missing) > 0 && (p.Verdict == trace.Delivered || p.Verdict == trace.Local) && p.Endpoint == nil {
			paths[i].Verdict, paths[i].Missing = trace.Unknown, append(p.Missing, op.Missing...)
		}
	}
	tr := &trace.Trace{Dataplane: "nftables", Packet: pkt, Paths: paths, Notes: notes, Conntrack: ct}
	tr.Finish()
	return tr, sn
}

// corpus reads a real dump of testdata/corpus, without the Markdown fences the paste front end takes away.
func corpus(t *testing.T, prefix string) string {
	t.Helper()
	names, _ := os.ReadDir("testdata/corpus")
	for _, n := range names {
		if strings.HasPrefix(n.Name(), prefix) {
			b, err := os.ReadFile("testdata/corpus/" + n.Name())
			if err != nil {
				t.Fatal(err)
			}
			var keep []string
			for _, l := range strings.Split(string(b), "\n") {
				if !strings.HasPrefix(l, "```") {
					keep = append(keep, l)
				}
			}
			return strings.Join(keep, "\n")
		}
	}
	t.Fatalf("no corpus file %s", prefix)
	return ""
}

func endpoints(tr *trace.Trace) map[string]float64 {
	out := map[string]float64{}
	for _, e := range tr.Endpoints {
		out[e.Addr()] = e.Probability
	}
	return out
}

func missingHas(tr *trace.Trace, sub string) bool {
	for _, m := range tr.Missing {
		if strings.Contains(m, sub) {
			return true
		}
	}
	return false
}

// TestTransactionCorpus: kube-proxy's whole transaction (corpus 02, proxier_test.go's baseRules + expected)
// traces to cases.json's hand-worked answers.
func TestTransactionCorpus(t *testing.T) {
	dump02 := corpus(t, "02-")
	for _, c := range []struct {
		name, src, dst string
		fromNode       bool
		verdict        string
		endpoints      map[string]float64
	}{
		{"NodePort 3003 from outside", "198.51.100.7", "192.168.0.2:3003", false, trace.Delivered, map[string]float64{"10.180.0.3:80": 1}},
		{"ClusterIP with two endpoints, from the node", "192.168.0.2", "172.30.0.44:80", true, trace.Delivered, map[string]float64{"10.180.0.4:80": 0.5, "10.180.0.5:80": 0.5}},
		{"ClusterIP with no endpoints, from the node", "192.168.0.2", "172.30.0.46:80", true, trace.Rejected, map[string]float64{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr, sn := traceDump(t, dump02, c.src, c.dst, "tcp", c.fromNode, "192.168.0.2")
			if tr.Verdict != c.verdict || len(tr.Missing) > 0 {
				t.Fatalf("verdict %s, missing %q\n%s", tr.Verdict, tr.Missing, dump(tr))
			}
			got := endpoints(tr)
			if len(got) != len(c.endpoints) {
				t.Fatalf("endpoints %v\n%s", got, dump(tr))
			}
			for ep, p := range c.endpoints {
				if got[ep] != p {
					t.Errorf("endpoint %s: chance %v, want %v", ep, got[ep], p)
				}
			}
			if c.verdict == trace.Delivered {
				// masquerading: the mark 0x4000 mark-for-masquerade set is there, and xor clears it.
				for _, p := range tr.Paths {
					if h := hopOf(p, "masquerading", 3); h == nil || !h.Matched || !strings.HasPrefix(h.Verdict, "masquerade") {
						t.Errorf("not masqueraded: %+v\n%s", h, dump(tr))
					}
					if h := hopOf(p, "masquerading", 2); h == nil || len(h.Changes) != 1 || h.Changes[0] != "mark 0x4000 -> 0x0" {
						t.Errorf("mark not cleared: %+v", h)
					}
				}
			}
			if want := "nft -f transaction (1 table, 32 chains, 5 maps, 3 sets)"; len(sn.ReadAs) != 1 || sn.ReadAs[0] != want {
				t.Errorf("read as %q, want %q", sn.ReadAs, want)
			}
		})
	}
}

// TestPastedParts: parts of rulesets (kube-proxy's per-service chains without its base chains, iptables-nft
// chains cut from their table, a filter table alone, a kube-proxy table whose nat chains are missing) trace
// to unknown, naming what they lack, not to "forwarded without translation".
func TestPastedParts(t *testing.T) {
	noNAT := `table ip kube-proxy {
	chain filter-output {
		type filter hook output priority filter; policy accept;
		ct state new jump service-endpoints-check
	}
	chain service-endpoints-check {
	}
	chain nat-services {
		ip daddr 172.30.0.44 dnat to 10.180.0.4:80
	}
}
`
	for _, c := range []struct {
		name, dump, src, dst, proto string
		want                        string
	}{
		{"corpus 03: per-service chains and elements", corpus(t, "03-"), "192.168.0.2", "172.30.0.44:80", "tcp", "a base chain: the input has no chain with a hook"},
		{"corpus 19: iptables-nft chains, table line cut off", corpus(t, "19-"), "192.168.0.2", "10.43.0.10:53", "udp", "a base chain: the input has no chain with a hook"},
		{"corpus 20: table ip filter only", corpus(t, "20-"), "192.168.0.2", "10.43.0.10:53", "udp", "a nat base chain at hook output"},
		{"kube-proxy table without nat chains", noNAT, "192.168.0.2", "172.30.0.44:80", "tcp", "a nat base chain at hook output"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr, _ := traceDump(t, c.dump, c.src, c.dst, c.proto, true, "192.168.0.2")
			if tr.Verdict != trace.Unknown || !missingHas(tr, c.want) {
				t.Fatalf("verdict %s, missing %q\n%s", tr.Verdict, tr.Missing, dump(tr))
			}
		})
	}
	// A whole ruleset with its nat chains stays decided (corpus 02 above; here a listing).
	whole := `table ip t {
	chain out {
		type nat hook output priority dstnat; policy accept;
		ip daddr 172.30.0.44 dnat to 10.180.0.4:80
	}
	chain pre {
		type nat hook prerouting priority dstnat; policy accept;
	}
}
`
	tr, _ := traceDump(t, whole, "192.168.0.2", "172.30.0.44:80", "tcp", true, "192.168.0.2")
	if tr.Verdict != trace.Delivered || len(tr.Missing) > 0 {
		t.Fatalf("verdict %s, missing %q\n%s", tr.Verdict, tr.Missing, dump(tr))
	}
}

// TestTransactionCommands: the commands of an nft -f script change the model as nft changes the ruleset.
func TestTransactionCommands(t *testing.T) {
	head := "add table ip t\nadd chain ip t c\n"
	rules := func(rs *Ruleset) string {
		var out []string
		for _, r := range rs.Table("ip", "t").Chain("c").Rules {
			out = append(out, r.Text)
		}
		return strings.Join(out, "; ")
	}
	for _, c := range []struct {
		name, tx, want string
		cut            bool // chain c may hold rules the input does not show
	}{
		{"add", "add rule ip t c accept\nadd rule ip t c drop\n", "accept; drop", false},
		{"insert", "add rule ip t c accept\ninsert rule ip t c drop\n", "drop; accept", false},
		{"index", "add rule ip t c accept\nadd rule ip t c drop\nadd rule ip t c index 0 counter\ninsert rule ip t c index 0 return\n", "return; accept; counter; drop", false},
		{"flush", "add rule ip t c accept\nflush chain ip t c\nadd rule ip t c drop\n", "drop", false},
		{"create and ; between commands", "create rule ip t c accept ; add rule ip t c drop\n", "accept ; add rule ip t c drop", false},
		{"delete by a handle the input does not show", "add rule ip t c accept\ndelete rule ip t c handle 7\n", "accept", true},
		{"destroy", "add rule ip t c accept\ndestroy rule ip t c handle 7\n", "accept", false},
		{"rules added to a chain not created", "add rule ip t d accept\nadd rule ip t c accept\n", "accept", false},
		{"delete chain", "add rule ip t c accept\ndelete chain ip t c\nadd chain ip t c\n", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			rs, err := ParseTransaction(head + c.tx)
			if err != nil {
				t.Fatal(err)
			}
			if got := rules(rs); got != c.want {
				t.Errorf("rules %q, want %q (warnings %q)", got, c.want, rs.Warnings)
			}
			if cut := rs.Table("ip", "t").Chain("c").Cut != ""; cut != c.cut {
				t.Errorf("cut %v, want %v", cut, c.cut)
			}
		})
	}
	rs, err := ParseTransaction("add rule t d accept\n")
	if err != nil {
		t.Fatal(err)
	}
	if d := rs.Table("ip", "t").Chain("d"); d == nil || d.Cut == "" || !d.headUnknown {
		t.Errorf("chain d not created by the input: %+v", d)
	}
	// Sets and maps: created, elements added, deleted, flushed; a map the input only adds elements to.
	rs, err = ParseTransaction(`add table ip t { comment "c" ; }
add set ip t s { type ipv4_addr ; flags dynamic,timeout ; timeout 3h ; comment "x" ; }
add element ip t s { 1.1.1.1, 2.2.2.2 }
delete element ip t s { 1.1.1.1 }
add map ip t m { type inet_proto . inet_service : verdict ; }
add element ip t m { tcp . 80 comment "a" : drop }
flush map ip t m
add element ip t n { 10.0.0.1 : goto c }
add chain ip t base { type nat hook prerouting priority dstnat ; policy drop ; comment "b" ; }
`)
	if err != nil {
		t.Fatal(err)
	}
	tb := rs.Table("ip", "t")
	if s := tb.Set("s"); s == nil || len(s.Elems) != 1 || s.Timeout != 10800 || strings.Join(s.Flags, ",") != "timeout,dynamic" || s.Comment != "x" || s.Cut != "" {
		t.Errorf("set s %+v", s)
	}
	if m := tb.Set("m"); m == nil || !m.Map || len(m.Elems) != 0 || strings.Join(m.DataType, "") != "verdict" {
		t.Errorf("map m %+v", m)
	}
	if n := tb.Set("n"); n == nil || !n.Map || len(n.Elems) != 1 || n.Cut == "" {
		t.Errorf("map n %+v", n)
	}
	if c := tb.Chain("base"); c == nil || c.Type != "nat" || c.Hook != "prerouting" || c.Prio != -100 || c.Policy != "drop" || c.Comment != "b" {
		t.Errorf("chain base %+v", c)
	}
	if tb.Comment != "c" || len(rs.Warnings) != 0 {
		t.Errorf("comment %q, warnings %q", tb.Comment, rs.Warnings)
	}
	if _, err := ParseTransaction("table ip t {\n}\nnonsense\n"); err != nil {
		t.Errorf("a listing's block in nft -f: %v", err)
	}
	if _, err := ParseTransaction("hello\n"); err == nil {
		t.Errorf("not a transaction: no error")
	}
}

// TestSniffFormats: what Sniff takes, how it says it read it, and what it refuses.
func TestSniffFormats(t *testing.T) {
	listing := "table ip t {\n\tchain c {\n\t\ttype filter hook input priority filter; policy accept;\n\t}\n\tset s {\n\t\ttype ipv4_addr\n\t}\n}\n"
	for _, c := range []struct {
		name, dump string
		ok         bool
		err        string
		readAs     string
	}{
		{"listing", listing, true, "", "nft list ruleset (1 table, 1 chain, 1 set)"},
		{"listing after a command line", "$ sudo nft list table ip t\n" + listing, true, "", "sudo nft list table ip t (1 table, 1 chain, 1 set)"},
		{"transaction", "# kube-proxy\nadd table ip kube-proxy\nadd map ip kube-proxy m { type ipv4_addr : verdict ; }\n", true, "", "nft -f transaction (1 table, 0 chains, 1 map)"},
		{"json", `{"nftables": [{"metainfo": {"version": "1.0.6"}}, {"table": {"family": "ip", "name": "t"}}]}`, true, "", "nft -j list ruleset (1 table, 0 chains)"},
		{"cut listing", "table ip t {\n\tchain c {\n\t\tip daddr 1.1.1.1 accept\n", true, "", "nft list ruleset (1 table, 1 chain; not all shown: table ip t, chain ip t c)"},
		{"json: metainfo only", `{"nftables": [{"metainfo": {"version": "1.0.6"}}]}`, true, "holds no tables", ""},
		{"json: not nft's", `{"nftables": [{"bogus": 1}]}`, true, `{"bogus": 1}, is not an object nft prints`, ""},
		{"json: numbers", `{"nftables": [1, 2]}`, true, "item 1 of the \"nftables\" array, 1, is not an object", ""},
		{"json: empty", `{"nftables": []}`, true, "holds no tables", ""},
		{"iptables-save", "*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n", false, "", ""},
		{"another command's output", "$ ip route\ndefault via 10.0.0.1 dev eth0\n", false, "", ""},
		{"loop", "table ip t {\n\tchain a {\n\t\tjump b\n\t}\n\tchain b {\n\t\tip saddr vmap { 1.1.1.1 : goto a }\n\t}\n}\n", true, "the rules loop: ip t a -> b -> a (the kernel refuses to load such a ruleset)", ""},
		{"transaction that deletes everything", "add table ip t\ndelete table ip t\n", true, "no tables", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			sn, ok, err := Engine{}.Sniff(c.dump)
			if ok != c.ok {
				t.Fatalf("ok %v, err %v", ok, err)
			}
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.ok && (len(sn.ReadAs) != 1 || sn.ReadAs[0] != c.readAs) {
				t.Errorf("read as %q, want %q", sn.ReadAs, c.readAs)
			}
		})
	}
	// A loop through a named verdict map is refused at Open too (a snapshot's part).
	part, _ := json.Marshal(Part{Transaction: "add table ip t\nadd chain ip t a\nadd map ip t m { type ipv4_addr : verdict ; }\nadd rule ip t a ip daddr vmap @m\nadd element ip t m { 1.1.1.1 : jump a }\n"})
	if _, err := (Engine{}).Open(part, dataplanes.OpenOptions{Node: "n"}); err == nil || !strings.Contains(err.Error(), "the rules loop: ip t a -> a") {
		t.Errorf("open: %v", err)
	}
}

// TestTruncated: a listing cut off (as pasted from an issue) is read as far as it is whole; a walk that
// reaches the cut ends unknown, naming it; one decided before the cut stays decided.
func TestTruncated(t *testing.T) {
	cut := `table ip filter {
	chain FWD {
		type filter hook forward priority filter; policy accept;
		ip daddr @blocked drop
	}
	set blocked {
		type ipv4_addr
		elements = { 10.9.9.9, 10.9.9.1
`
	rules := `table ip filter {
	chain FORWARD {
		type filter hook forward priority filter; policy accept;
		ip daddr 10.1.1.1 drop
		ip daddr 10.2.2.2 tcp dport 80 counter
`
	nat := "table ip nat {\n\tchain PREROUTING {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t}\n\tchain OUTPUT {\n\t\ttype nat hook output priority dstnat; policy accept;\n\t}\n}\n"
	for _, c := range []struct {
		name, dump, dst string
		verdict         string
		missing         string
	}{
		{"decided before the cut", nat + rules, "10.1.1.1:80", trace.Dropped, ""},
		{"reaches the cut", nat + rules, "10.3.3.3:80", trace.Unknown, "the rest of chain ip filter FORWARD: the input ends inside it (cut?)"},
		// The last line does not end: `tcp dport 80 counter` may be the start of `… drop`, so it is left out.
		{"cut mid-rule", nat + strings.TrimSuffix(rules, " counter\n") + " dr", "10.2.2.2:80", trace.Unknown, "the rest of chain ip filter FORWARD"},
		{"found in a cut set", nat + cut + "", "10.9.9.9:80", trace.Dropped, ""},
		{"not found in a cut set", nat + cut, "10.8.8.8:80", trace.Unknown, "whether ip daddr 10.8.8.8 is in set ip filter blocked: the input ends inside it (cut?)"},
		// 10.9.9.1 may be the start of 10.9.9.10: the last element read is left out.
		{"the last element of a cut set", nat + cut, "10.9.9.1:80", trace.Unknown, "whether ip daddr 10.9.9.1 is in set"},
		// Rules a paste left out ("...") were assumed to be a statement that matches (before: dropped by the
		// rule after them, though the left-out ones may have decided it).
		{"reaches lines left out", nat + strings.Replace(rules, "\t\tip daddr 10.2.2.2", "\t\t...\n\t\tip daddr 10.2.2.2", 1) + "\t}\n}\n", "10.2.2.2:80", trace.Unknown, "the rules the paste left out of ip filter FORWARD where it says \"...\""},
		{"decided before lines left out", nat + strings.Replace(rules, "\t\tip daddr 10.2.2.2", "\t\t...\n\t\tip daddr 10.2.2.2", 1) + "\t}\n}\n", "10.1.1.1:80", trace.Dropped, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := c.dump
			tr, _ := traceDump(t, d, "10.0.0.5", c.dst, "tcp", false, "192.168.0.2")
			if tr.Verdict != c.verdict || c.missing != "" && !missingHas(tr, c.missing) {
				t.Fatalf("verdict %s, missing %q\n%s", tr.Verdict, tr.Missing, dump(tr))
			}
		})
	}
}

// TestParseTextFragment: a listing that starts inside a table (an issue's excerpt, its "table" line cut off) is
// read into a table of unknown name that is marked as not all shown.
func TestParseTextFragment(t *testing.T) {
	rs, err := ParseText("\tchain c {\n\t\tip daddr 1.1.1.1 jump d\n\t}\n\n\tchain d {\n\t\taccept\n\t}\n}\n")
	if err != nil {
		t.Fatal(err)
	}
	tb := rs.Table("ip", FragmentTable)
	if len(rs.Tables) != 1 || tb == nil || tb.Cut == "" || len(tb.Chains) != 2 || len(tb.Chain("c").Rules) != 1 || len(rs.Warnings) != 0 {
		t.Fatalf("%+v %q", rs.Tables, rs.Warnings)
	}
}
