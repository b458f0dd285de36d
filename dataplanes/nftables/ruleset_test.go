package nftables

import (
	"os"
	"strings"
	"testing"
)

// TestParseCapture reads the t2-worker capture: tables, base chains, sets and maps with their elements, rules
// with their statements and the exact text of `nft -a list ruleset`.
func TestParseCapture(t *testing.T) {
	rs := loadFixture(t, "nftables-worker", true)
	if len(rs.Warnings) != 0 {
		t.Errorf("warnings: %q", rs.Warnings)
	}
	if rs.Version != "1.0.6" || len(rs.Tables) != 1 {
		t.Fatalf("version %q, %d tables", rs.Version, len(rs.Tables))
	}
	tb := rs.Table("ip", "kube-proxy")
	if tb == nil || tb.Handle != 2 || len(tb.Chains) != 17 || len(tb.Sets) != 7 {
		t.Fatalf("table %+v", tb)
	}
	c := tb.Chain("filter-prerouting-pre-dnat")
	if c == nil || !c.IsBase() || c.Type != "filter" || c.Hook != "prerouting" || c.Prio != -110 || c.Policy != "accept" || c.Handle != 9 {
		t.Errorf("filter-prerouting-pre-dnat: %+v", c)
	}
	if c := tb.Chain("nat-postrouting"); c == nil || c.Type != "nat" || c.Prio != 100 {
		t.Errorf("nat-postrouting: %+v", c)
	}
	if c := tb.Chain("services"); c == nil || c.IsBase() || c.Policy != "" || len(c.Rules) != 3 {
		t.Errorf("services: %+v", c)
	}

	hp := tb.Set("@hairpin-connections")
	if hp == nil || hp.Map || len(hp.Type) != 4 || hp.Type[3] != "inet_service" || len(hp.Elems) != 2 {
		t.Fatalf("hairpin-connections: %+v", hp)
	}
	if k := hp.Elems[1].Key; k.Kind != KConcat || len(k.Args) != 4 || k.Args[1].Str != "10.244.1.3" || k.Args[3].Num != 80 {
		t.Errorf("hairpin element %+v", k)
	}
	sips := tb.Set("service-ips")
	if sips == nil || !sips.Map || len(sips.DataType) != 1 || sips.DataType[0] != "verdict" || len(sips.Elems) != 1 {
		t.Fatalf("service-ips: %+v", sips)
	}
	if v := sips.Elems[0].Value; v.Kind != KVerdict || v.Str != "goto" || v.Target != "service-PFISGYVC-default/web/tcp/" {
		t.Errorf("service-ips value %+v", v)
	}
	if s := tb.Set("cluster-ips"); s == nil || len(s.Elems) != 1 || s.Elems[0].Key.Str != "10.96.227.102" {
		t.Errorf("cluster-ips %+v", s)
	}
	if s := tb.Set("no-endpoint-services"); s == nil || len(s.Elems) != 0 || s.Kind() != "map" {
		t.Errorf("no-endpoint-services %+v", s)
	}

	r := tb.Chain("services").Rules[0]
	if r.Handle != 50 || r.Comment != "masquerade clusterIP traffic from outside cluster" ||
		r.Text != `ip daddr @cluster-ips ip saddr != 10.244.0.0/16 meta mark set meta mark | 0x00004000 comment "masquerade clusterIP traffic from outside cluster"` {
		t.Errorf("services rule 1: %+v", r)
	}
	kinds := func(r *Rule) string {
		var k []string
		for _, s := range r.Stmts {
			k = append(k, s.Kind)
		}
		return strings.Join(k, ",")
	}
	if k := kinds(r); k != "match,match,mangle" {
		t.Errorf("services rule 1 statements %s", k)
	}
	dn := tb.Chain("service-PFISGYVC-default/web/tcp/").Rules[0]
	if k := kinds(dn); k != "match,dnat" {
		t.Errorf("dnat rule statements %s", k)
	}
	nat := dn.Stmts[1]
	if nat.Family != "ip" || nat.Addr == nil || nat.Addr.Kind != KMap || nat.Addr.Args[0].Kind != KNumgen || nat.Addr.Args[0].Mod != 3 ||
		len(nat.Addr.Args[1].Args) != 3 || nat.Addr.Args[1].Args[2].Kind != KPair {
		t.Errorf("dnat statement %+v", nat)
	}
	if dn.Text != "meta l4proto tcp dnat ip to numgen random mod 3 map { 0 : 10.244.1.2 . 80, 1 : 10.244.1.3 . 80, 2 : 10.244.2.2 . 80 }" {
		t.Errorf("dnat text %q", dn.Text)
	}
	m := tb.Chain("masquerading").Rules[0]
	if m.Stmts[2].Kind != SMasquerade || len(m.Stmts[2].Flags) != 1 || m.Stmts[2].Flags[0] != "fully-random" {
		t.Errorf("masquerade %+v", m.Stmts[2])
	}
	if rj := tb.Chain("reject-chain").Rules[0]; rj.Text != "reject" || rj.Stmts[0].RejectType != "icmp" || rj.Stmts[0].RejectCode != "port-unreachable" {
		t.Errorf("reject %+v", rj.Stmts[0])
	}
}

// TestParseAffinityAndComments: element comments, timeouts and expiry of the nfh1 captures.
func TestParseAffinityAndComments(t *testing.T) {
	tb := loadFixture(t, "nfh1-worker-after-sticky", true).Table("ip", "kube-proxy")
	s := tb.Set("affinity-6VAY5H5W-default/sticky/tcp/http__10.244.1.2/80")
	if s == nil || s.Timeout != 10800 || len(s.Elems) != 1 || s.Elems[0].Key.Str != "172.18.0.1" || s.Elems[0].Expires <= 0 {
		t.Fatalf("affinity set %+v", s)
	}
	ne := tb.Set("no-endpoint-nodeports")
	if ne == nil || len(ne.Elems) != 1 || ne.Elems[0].Comment != "default/empty:http" || ne.Elems[0].Key.Kind != KConcat {
		t.Fatalf("no-endpoint-nodeports %+v", ne)
	}
	up := tb.Chain("endpoint-6VAY5H5W-default/sticky/tcp/http__10.244.1.2/80").Rules[0]
	if up.Stmts[0].Kind != SSetUpdate || up.Stmts[0].Op != "update" || up.Stmts[0].Target != "affinity-6VAY5H5W-default/sticky/tcp/http__10.244.1.2/80" {
		t.Errorf("update %+v", up.Stmts[0])
	}
}

// TestParseTextByHandle: texts are taken by table and handle; rules the text lacks are rendered.
func TestParseTextByHandle(t *testing.T) {
	js, err := os.ReadFile("testdata/nftables-worker.json")
	if err != nil {
		t.Fatal(err)
	}
	text := "table ip kube-proxy { # handle 2\n\tchain services { # handle 26\n\t\tip daddr . meta l4proto . th dport vmap @service-ips comment \"# handle 3\" # handle 51\n\t}\n}\ntable ip other { # handle 3\n\tchain x { # handle 1\n\t\tdrop # handle 50\n\t}\n}\n"
	rs, err := ParseRuleset(js, text)
	if err != nil {
		t.Fatal(err)
	}
	c := rs.Table("ip", "kube-proxy").Chain("services")
	if got := c.Rules[1].Text; got != `ip daddr . meta l4proto . th dport vmap @service-ips comment "# handle 3"` {
		t.Errorf("rule 51: %q", got)
	}
	// Handle 50 of another table must not be taken for kube-proxy's handle 50.
	if got := c.Rules[0].Text; !strings.HasPrefix(got, "ip daddr @cluster-ips ip saddr != 10.244.0.0/16") {
		t.Errorf("rule 50: %q", got)
	}
}

// TestParseErrors: bad input gives an error or warnings, never a panic.
func TestParseErrors(t *testing.T) {
	for _, in := range []string{"", "{", "[]", `{"nftables": 3}`, `{"other": []}`, "null"} {
		if _, err := ParseRuleset([]byte(in), ""); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
	rs, err := ParseRuleset([]byte(`{"nftables": [3, {"table": 4}, {"chain": {"family": "ip", "table": "nope", "name": "c"}},
		{"table": {"family": "ip", "name": "t"}}, {"table": {"family": "ip", "name": "t"}},
		{"chain": {"family": "ip", "table": "t", "name": "c", "hook": "input", "prio": "x"}},
		{"rule": {"family": "ip", "table": "t", "chain": "zz", "expr": []}},
		{"rule": {"family": "ip", "table": "t", "chain": "c", "expr": [{"match": 1}, {"weird": {}}, {"vmap": {"key": 1}}, {"jump": {}}, {"dnat": {"addr": {"map": 7}}}, 5]}},
		{"set": {"family": "ip", "table": "t", "name": "s", "type": 5, "elem": [[1], {"elem": {}}, {"concat": 3}]}},
		{"map": {"family": "ip", "table": "t", "name": "m", "type": ["a", 2], "map": "verdict", "elem": [1, [1, 2, 3], [{"range": [1]}, {"goto": 1}]]}}]}`), "garbage\n\tchain x {\n # handle zz\n}")
	if err != nil {
		t.Fatal(err)
	}
	if len(rs.Warnings) < 4 {
		t.Errorf("warnings %q", rs.Warnings)
	}
	c := rs.Table("ip", "t").Chain("c")
	if c == nil || len(c.Rules) != 1 || len(c.Rules[0].Stmts) != 6 || c.Policy != "accept" {
		t.Fatalf("chain %+v", c)
	}
	_ = RenderRule(c.Rules[0])
}
