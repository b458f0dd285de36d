package iptables

import (
	"fmt"
	"math"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
	"github.com/k8sguide/k8sguide/dataplanes/netstate"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// walkBounded walks text straight through the walker, past the load-time loop check the CLI makes (Engine.Open
// refuses rules that loop; the fuzz targets and any other caller do not), and fails when the walk costs more
// than a small input may: 64 MB of allocations. (It also failed past a quarter of a second, which a loaded
// machine reached with no change to the walk: 0.6-0.7 s at a load average of 7; the allocations and the walk's
// own evaluation budget bound the work without a clock.)
func walkBounded(t *testing.T, text string) (trace.Trace, netfilter.Result) {
	t.Helper()
	r, err := ParseSave(text)
	if err != nil {
		t.Fatal(err)
	}
	n := netstate.FromLocalAddresses([]netip.Addr{netip.MustParseAddr("172.18.0.3")})
	flow := trace.Flow{Src: netip.MustParseAddr("172.18.0.1"), Dst: netip.MustParseAddr("172.18.0.3"), Dport: 30080, Proto: "tcp"}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res := netfilter.Outcomes([]netfilter.Ruleset{r}, &n, flow, netfilter.Origin{Iif: "eth0"}, nil)
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Errorf("%d bytes of rules: the walk allocated %d MB", len(text), grew>>20)
	}
	tr := trace.Trace{Paths: slices.Clone(res.Paths), Notes: res.Notes, Unexplored: res.Unexplored}
	tr.Finish()
	return tr, res
}

// TestWalkStopsLoops: rules that loop, walked without the load-time check, cost 2.7-4.6 s and 1.7-1.9 GB for
// 75 bytes (a jump back), and a fork inside the loop ran for over 10 minutes and 22 GB (issue 36). The walker
// stops where the loop closes, names it, and the path is unknown.
func TestWalkStopsLoops(t *testing.T) {
	for _, tc := range []struct{ name, rules, loop string }{
		{"jump back", "-A PREROUTING -j X\n-A X -j PREROUTING\n", "PREROUTING -> X -> PREROUTING"},
		{"goto itself", "-A PREROUTING -j X\n-A X -g X\n", "X -> X"},
		{"goto back past a goto", "-A PREROUTING -j A\n-A A -g B\n-A B -j A\n", "A -> B -> A"},
		{"fork in the loop", "-A PREROUTING -j X\n-A X -m statistic --mode random --probability 0.5 -j Y\n-A X -j Y\n-A Y -j X\n", "X -> Y -> X"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, _ := walkBounded(t, "*nat\n:PREROUTING ACCEPT [0:0]\n"+tc.rules+"COMMIT\n")
			if tr.Verdict != trace.Unknown || !strings.Contains(strings.Join(tr.Missing, "\n"), "nat jumps in a circle ("+tc.loop+")") {
				t.Errorf("verdict %s, missing %q", tr.Verdict, tr.Missing)
			}
		})
	}
	// A chain jumped to twice, one after the other, is no loop.
	tr, _ := walkBounded(t, "*nat\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -j M\n-A PREROUTING -j M\n-A PREROUTING -p tcp -j DNAT --to-destination 10.244.1.2:80\n-A M -j MARK --set-xmark 0x4000/0x4000\nCOMMIT\n")
	if tr.Verdict != trace.Delivered {
		t.Errorf("a chain jumped to twice: verdict %s, missing %q", tr.Verdict, tr.Missing)
	}
}

// TestWalkBoundsItsWork: input that loops nowhere can still multiply the walk. Thirty chains that each jump to
// the next twice are 2³⁰ evaluations (894 bytes: 2.6 s and 1.1 GB before the walk bounded a path by the input's
// size); seventy chains deep is deeper than any kernel walks.
func TestWalkBoundsItsWork(t *testing.T) {
	var b strings.Builder
	b.WriteString("*nat\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -j C0\n")
	for i := range 30 {
		fmt.Fprintf(&b, "-A C%d -j C%d\n-A C%d -j C%d\n", i, i+1, i, i+1)
	}
	b.WriteString("-A C30 -j MARK --set-xmark 0x1/0x1\nCOMMIT\n")
	tr, _ := walkBounded(t, b.String())
	if tr.Verdict != trace.Unknown || !strings.Contains(strings.Join(tr.Missing, "\n"), "stopped this path after") {
		t.Errorf("doubling chains: verdict %s, missing %q", tr.Verdict, tr.Missing)
	}

	b.Reset()
	b.WriteString("*nat\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -j C0\n")
	for i := range 70 {
		fmt.Fprintf(&b, "-A C%d -j C%d\n", i, i+1)
	}
	b.WriteString("COMMIT\n")
	tr, _ = walkBounded(t, b.String())
	if tr.Verdict != trace.Unknown || !strings.Contains(strings.Join(tr.Missing, "\n"), "jumps more than 64 chains deep") {
		t.Errorf("70 chains deep: verdict %s, missing %q", tr.Verdict, tr.Missing)
	}
}

// TestWalkCarriesWhatItDidNotExplore: thirty random choices, each of which goes on to the same DNAT, are 2³⁰
// paths that all reach 10.244.1.2. The walk stops at its bounds; the endpoint read 0.00% (issue 36). The chance
// of what it did not walk is carried (Unexplored), the paths' and its chances add up to 1, the endpoint's chance
// is a lower bound and the verdict is unknown for the rest.
func TestWalkCarriesWhatItDidNotExplore(t *testing.T) {
	var b strings.Builder
	b.WriteString("*nat\n:PREROUTING ACCEPT [0:0]\n")
	for range 30 {
		b.WriteString("-A PREROUTING -m statistic --mode random --probability 0.5 -j MARK --set-xmark 0x1/0x1\n")
	}
	b.WriteString("-A PREROUTING -p tcp -j DNAT --to-destination 10.244.1.2:80\nCOMMIT\n")
	tr, res := walkBounded(t, b.String())
	sum := res.Unexplored
	for i, p := range res.Paths {
		sum += p.Probability
		// The last path walked may be the one the budget stopped half-way: unknown, saying so.
		if p.Verdict != trace.Delivered && (i < len(res.Paths)-1 || !strings.Contains(strings.Join(p.Missing, ""), "rule evaluations in this trace")) {
			t.Fatalf("walked path %d is %s: %q", i+1, p.Verdict, p.Missing)
		}
	}
	if res.Unexplored < 0.99 || math.Abs(sum-1) > 1e-9 {
		t.Fatalf("unexplored %v, chances add up to %v", res.Unexplored, sum)
	}
	if len(tr.Endpoints) != 1 || tr.Verdict != trace.Unknown {
		t.Fatalf("verdict %s, endpoints %+v", tr.Verdict, tr.Endpoints)
	}
	if got := tr.Chance(tr.Endpoints[0].Probability); !strings.HasPrefix(got, "≥0.000") || got == "≥0.00%" {
		t.Errorf("the endpoint's chance reads %s", got)
	}
	if !strings.Contains(strings.Join(tr.Missing, "\n"), "the outcomes of 99.99") || !strings.Contains(strings.Join(tr.Notes, "\n"), "of new flows not explored") {
		t.Errorf("missing %q, notes %q", tr.Missing, tr.Notes)
	}
}
