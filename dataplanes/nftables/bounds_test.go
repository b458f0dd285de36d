package nftables

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// TestWalkBoundsDepthAndLoops: walked past the load-time check (checkLoops), chains that jump 20 deep stop at
// nf_tables' 16 and a goto loop with a random fork in it stops where it closes, each at once and saying why.
// Before the walker bounded itself, the loop ran to its 2,000,000 evaluations in each of its forks' paths, for
// seconds (FuzzParseText and FuzzTransaction skip such input for that reason).
func TestWalkBoundsDepthAndLoops(t *testing.T) {
	var deep strings.Builder
	deep.WriteString("table ip t {\n\tchain p {\n\t\ttype filter hook prerouting priority 0; policy accept;\n\t\tjump c0\n\t}\n")
	for i := range 20 {
		fmt.Fprintf(&deep, "\tchain c%d {\n\t\tjump c%d\n\t}\n", i, i+1)
	}
	deep.WriteString("\tchain c20 {\n\t\taccept\n\t}\n}\n")
	loop := "table ip t {\n\tchain p {\n\t\ttype filter hook prerouting priority 0; policy accept;\n\t\tjump a\n\t}\n" +
		"\tchain a {\n\t\tnumgen random mod 2 vmap { 0 : goto b, 1 : goto b }\n\t}\n\tchain b {\n\t\tgoto a\n\t}\n}\n"
	for _, tc := range []struct{ name, text, want string }{
		{"20 deep", deep.String(), "jumps more than 16 chains deep"},
		{"goto loop with a fork", loop, "ip t jumps in a circle (a -> b -> a)"},
	} {
		rs, err := ParseText(tc.text)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		tr := walkFlow(t, rs, nodeState(t, "nftables-worker"), "1.2.3.4", "172.18.0.3:80", "tcp", netfilter.Origin{Iif: "eth0"})
		if took := time.Since(start); took > 250*time.Millisecond {
			t.Errorf("%s: the walk took %v", tc.name, took)
		}
		if tr.Verdict != trace.Unknown || !strings.Contains(strings.Join(tr.Missing, "\n"), tc.want) {
			t.Errorf("%s: verdict %s, missing %q", tc.name, tr.Verdict, tr.Missing)
		}
	}
}
