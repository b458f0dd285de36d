package render

import (
	"bytes"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// TestWriteCounted: a real run's numbers (an iptables lab, 300 connections to worker2's NodePort): the endpoints
// with chance, expected and answered, the cascade's rules with the kernel's counts of what reached each, the
// verdict; within 100 and 80 columns.
func TestWriteCounted(t *testing.T) {
	ep := func(pod string, n int) trace.CountedEndpoint {
		return trace.CountedEndpoint{Endpoint: trace.Endpoint{Pod: "default/web-85bffcdccf-" + pod, Probability: 1.0 / 3}, Answered: n}
	}
	c := &trace.Counted{Node: "g38-worker2", Dst: "172.18.0.4:32083", Dataplane: "iptables", Made: 300, Answered: 300,
		Endpoints: []trace.CountedEndpoint{ep("294q8", 99), ep("wfrhd", 113), ep("7ql7q", 88)},
		Rules: []trace.CountedRule{
			{Chain: "KUBE-SVC-LOLE4ISW44XBNF3G", Rule: 2, Chance: 1.0 / 3, Before: 10, After: 109, Reached: 300, Endpoint: "default/web-85bffcdccf-294q8"},
			{Chain: "KUBE-SVC-LOLE4ISW44XBNF3G", Rule: 3, Chance: 0.5, Before: 0, After: 113, Reached: 201, Endpoint: "default/web-85bffcdccf-wfrhd"},
			{Chain: "KUBE-SVC-LOLE4ISW44XBNF3G", Rule: 4, Chance: 1, Before: 0, After: 88, Reached: 88, Endpoint: "default/web-85bffcdccf-7ql7q"},
		},
		Verdict: "the answers fit the trace's chances (chi-square 3.14 on 2 degrees of freedom, p = 0.21)"}
	for _, width := range []int{100, 80} {
		var b bytes.Buffer
		if err := WriteCounted(&b, width, c); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		for _, want := range []string{"300 of 300 connections", "default/web-85bffcdccf-wfrhd  0.333   100.0     113", "3     0.50000     113 of 201  0.562", "4     the rest    88 of 88", "Verdict: the answers fit"} {
			if !strings.Contains(out, want) {
				t.Errorf("at %d columns, no %q in:\n%s", width, want, out)
			}
		}
		for _, line := range strings.Split(out, "\n") {
			if TextWidth(line) > width {
				t.Errorf("at %d columns, a line of %d: %q", width, TextWidth(line), line)
			}
		}
	}
}
