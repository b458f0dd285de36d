package nftables

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/inspect/netfilter"
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
