package nftables

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
)

// bigRuleset adds n Services (ClusterIP 10.97.x.y:80, each with a no-endpoint element too) to the t2 capture,
// the shape of a cluster with n Services.
func bigRuleset(tb testing.TB, n int) *Ruleset {
	b, err := os.ReadFile("testdata/nftables-worker.json")
	if err != nil {
		tb.Fatal(err)
	}
	var ips, svc, noep []string
	for i := 0; i < n; i++ {
		ip := fmt.Sprintf("10.97.%d.%d", i/250, i%250+1)
		ips = append(ips, fmt.Sprintf("%q", ip))
		svc = append(svc, fmt.Sprintf(`[{"concat": [%q, "tcp", 80]}, {"goto": {"target": "service-PFISGYVC-default/web/tcp/"}}]`, ip))
		noep = append(noep, fmt.Sprintf(`[{"concat": [%q, "tcp", 81]}, {"goto": {"target": "reject-chain"}}]`, ip))
	}
	s := string(b)
	s = strings.Replace(s, `"elem": ["10.96.227.102"]`, `"elem": [`+strings.Join(ips, ",")+`, "10.96.227.102"]`, 1)
	s = strings.Replace(s, `"map": "verdict", "elem": [[{"concat": ["10.96.227.102"`, `"map": "verdict", "elem": [`+strings.Join(svc, ",")+`, [{"concat": ["10.96.227.102"`, 1)
	s = strings.Replace(s, `"comment": "vmap to drop or reject packets to services with no endpoints", "map": "verdict"`, `"comment": "vmap to drop or reject packets to services with no endpoints", "map": "verdict", "elem": [`+strings.Join(noep, ",")+`]`, 1)
	rs, err := ParseRuleset([]byte(s), "")
	if err != nil {
		tb.Fatal(err)
	}
	if got := len(rs.Table("ip", "kube-proxy").Set("service-ips").Elems); got != n+1 {
		tb.Fatalf("service-ips has %d elements", got)
	}
	return rs
}

// BenchmarkWalk5000Services: a NodePort packet on a node with 5000 Services (3 paths).
func BenchmarkWalk5000Services(b *testing.B) {
	rs := bigRuleset(b, 5000)
	st := nodeState(b, "nftables-worker")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tr := walkFlow(b, rs, st, "172.18.0.1:40002", "172.18.0.3:30696", "tcp", netfilter.Origin{Iif: "eth0"})
		if len(tr.Paths) != 3 {
			b.Fatal(dump(tr))
		}
	}
}

// bigRulesetText is the t2 capture's text with n more Services the way kube-proxy writes them: each with a
// ClusterIP (cluster-ips, service-ips), a NodePort (service-nodeports), a service chain that picks one of three
// endpoints and an external chain that marks for masquerading: the shape of a node with n NodePort Services.
func bigRulesetText(tb testing.TB, n int) string {
	b, err := os.ReadFile("testdata/nftables-worker.nft")
	if err != nil {
		tb.Fatal(err)
	}
	var ips, svcs, nodeports, chains strings.Builder
	for i := 0; i < n; i++ {
		ip := fmt.Sprintf("10.97.%d.%d", i/250, i%250+1)
		svc := fmt.Sprintf("service-%08X-default/svc-%d/tcp/", i, i)
		ext := fmt.Sprintf("external-%08X-default/svc-%d/tcp/", i, i)
		fmt.Fprintf(&ips, "%s,\n\t\t\t     ", ip)
		fmt.Fprintf(&svcs, "%s . tcp . 80 : goto %s,\n\t\t\t     ", ip, svc)
		fmt.Fprintf(&nodeports, "tcp . %d : goto %s,\n\t\t\t     ", 30000+i, ext)
		fmt.Fprintf(&chains, "\tchain %s { # handle %d\n\t\tmeta l4proto tcp dnat ip to numgen random mod 3 map { 0 : 10.244.%d.2 . 80, 1 : 10.244.%d.3 . 80, 2 : 10.244.%d.4 . 80 } # handle %d\n\t}\n\n",
			svc, 1000+5*i, i%250, i%250, i%250, 1001+5*i)
		fmt.Fprintf(&chains, "\tchain %s { # handle %d\n\t\tmeta mark set meta mark | 0x00004000 comment \"masquerade\" # handle %d\n\t\tgoto %s # handle %d\n\t}\n\n",
			ext, 1002+5*i, 1003+5*i, svc, 1004+5*i)
	}
	s := string(b)
	for _, r := range [][2]string{
		{"elements = { 10.96.227.102 }", "elements = { " + ips.String() + "10.96.227.102 }"},
		{"elements = { 10.96.227.102 . tcp . 80 :", "elements = { " + svcs.String() + "10.96.227.102 . tcp . 80 :"},
		{"elements = { tcp . 30696 :", "elements = { " + nodeports.String() + "tcp . 30696 :"},
		{"\tchain filter-prerouting-pre-dnat {", chains.String() + "\tchain filter-prerouting-pre-dnat {"},
	} {
		if !strings.Contains(s, r[0]) {
			tb.Fatalf("fixture changed: %q not found", r[0])
		}
		s = strings.Replace(s, r[0], r[1], 1)
	}
	return s
}

// BenchmarkParseText5000: ParseText of a node's listing with 5,000 NodePort Services (about 2.4 MB).
func BenchmarkParseText5000(b *testing.B) {
	text := bigRulesetText(b, 5000)
	rs, err := ParseText(text)
	if err != nil || len(rs.Warnings) != 0 {
		b.Fatal(err, rs.Warnings)
	}
	if tb := rs.Table("ip", "kube-proxy"); len(tb.Chains) != 17+10000 || len(tb.Set("service-ips").Elems) != 5001 {
		b.Fatalf("%d chains, %d services", len(tb.Chains), len(tb.Set("service-ips").Elems))
	}
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := ParseText(text); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseTextFile: ParseText of the listing K8SGUIDE_BIG_NFT_TEXT names, such as the lab node's with
// 5,000 NodePort Services (see TestParseTextBigRuleset).
func BenchmarkParseTextFile(b *testing.B) {
	name := os.Getenv("K8SGUIDE_BIG_NFT_TEXT")
	if name == "" {
		b.Skip("K8SGUIDE_BIG_NFT_TEXT names an `nft list ruleset` listing; not set")
	}
	text, err := os.ReadFile(name)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := ParseText(string(text)); err != nil {
			b.Fatal(err)
		}
	}
}
