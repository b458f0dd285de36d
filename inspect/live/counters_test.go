package live

import (
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/tracer"
)

func counted(answers ...int) *trace.Counted {
	c := &trace.Counted{}
	for i, a := range answers {
		c.Endpoints = append(c.Endpoints, trace.CountedEndpoint{Endpoint: trace.Endpoint{Pod: "default/web-" + string(rune('a'+i)), Probability: 1 / float64(len(answers))}, Answered: a})
		c.Answered += a
	}
	return c
}

// TestConclude: Pearson's chi-square against the trace's chances: 99/113/88 of 300 (a real run on an iptables
// lab) fits (p = 0.21); 150/100/50 does not; 2/1/0 is too few to tell and says how many to make; a pod the
// trace gives no chance that answers makes the trace wrong.
func TestConclude(t *testing.T) {
	for _, tc := range []struct {
		c        *trace.Counted
		want     string
		chi, p   float64
		checkNum bool
	}{
		{counted(99, 113, 88), "the answers fit the trace's chances", 3.14, 0.208, true},
		{counted(150, 100, 50), "do not fit", 50, 1.4e-11, true},
		{counted(2, 1, 0), "too few connections to tell: an endpoint expects 1.0 answers; make at least 15", 0, 0, false},
		{counted(5), "one endpoint", 0, 1, true},
	} {
		conclude(tc.c)
		if !strings.Contains(tc.c.Verdict, tc.want) {
			t.Errorf("%v: verdict %q, want %q", tc.c.Endpoints, tc.c.Verdict, tc.want)
		}
		if tc.checkNum && (abs(tc.c.ChiSquare-tc.chi) > 0.01 || abs(tc.c.P-tc.p) > 0.001) {
			t.Errorf("%v: chi-square %.4f p %.4g, want %.2f and %.3g", tc.c.Endpoints, tc.c.ChiSquare, tc.c.P, tc.chi, tc.p)
		}
	}
	c := counted(10, 10)
	c.Endpoints[1].Endpoint.Probability, c.Endpoints[0].Endpoint.Probability = 0, 1
	conclude(c)
	if !strings.Contains(c.Verdict, "the trace is wrong") {
		t.Errorf("a pod with no chance answered: %q", c.Verdict)
	}
}

func abs(x float64) float64 { return max(x, -x) }

// TestChoiceRules: on a real kind node's iptables snapshot (cmd/k8sguide/app/testdata, from a kind lab), the
// NodePort's trace parts in KUBE-SVC-…: three rules, with the cascade's own chances 1/3, 1/2 and the rest, each
// sending to a different pod.
func TestChoiceRules(t *testing.T) {
	s, err := tracer.LoadFile("../../cmd/k8sguide/app/testdata/iptables-worker2.v1.json", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tracer.Trace(s, tracer.Request{Dst: "172.18.0.4:31758"})
	if err != nil {
		t.Fatal(err)
	}
	rules, chain := choiceRules(tr, "nat")
	if !strings.HasPrefix(chain, "KUBE-SVC-") || len(rules) != 3 {
		t.Fatalf("chain %q, rules %+v", chain, rules)
	}
	seen := map[string]bool{}
	for i, want := range []float64{1.0 / 3, 0.5, 1} {
		r := rules[i]
		if abs(r.Chance-want) > 1e-6 || seen[r.Endpoint] || r.Endpoint == "" || (i > 0 && r.Rule <= rules[i-1].Rule) {
			t.Errorf("rule %d: %+v: want chance %v, a pod of its own, in chain order", i, r, want)
		}
		seen[r.Endpoint] = true
	}
}

// TestFreshPorts: the run's client ports are distinct, in --verify's range, none of a port a record held before
// the run; and none at all (the kernel's choice) when there are not enough.
func TestFreshPorts(t *testing.T) {
	avoid := map[uint16]bool{}
	for p := uint16(40000); p < 59990; p++ {
		avoid[p] = true
	}
	got := freshPorts(10, avoid)
	if len(got) != 10 {
		t.Fatalf("%d ports, want 10", len(got))
	}
	seen := map[uint16]bool{}
	for _, p := range got {
		if p < 59990 || p >= 60000 || seen[p] {
			t.Errorf("port %d: want each of 59990-59999 once", p)
		}
		seen[p] = true
	}
	if got := freshPorts(11, avoid); got != nil {
		t.Errorf("11 of 10 free ports: got %v, want nil", got)
	}
}
