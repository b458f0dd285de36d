package render

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

func TestShorten(t *testing.T) {
	for _, c := range []struct {
		f    func(string, int) string
		in   string
		n    int
		want string
	}{
		{ShortenMiddle, "KUBE-SVC-LOLE4ISW44XBNF3G", 12, "KUBE-S…BNF3G"},
		{ShortenMiddle, "short", 12, "short"},
		{ShortenEnd, "KUBE-SVC-LOLE4ISW44XBNF3G", 12, "KUBE-SVC-LO…"},
		{ShortenMiddle, "abc", 1, "…"},
		{ShortenMiddle, "abc", 0, ""},
	} {
		if got := c.f(c.in, c.n); got != c.want {
			t.Errorf("shorten(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}

// A rule cut to fit keeps its comment and its target while they fit, the matches between giving way first.
func TestShortenRuleKeepsCommentAndTarget(t *testing.T) {
	rule := `-m comment --comment "default/web -> 10.244.1.2:80" -m statistic --mode random --probability 0.33333333349 -j KUBE-SEP-MQ4W7Q2CV67URU6Q`
	got := shortenRule(rule, 70)
	if TextWidth(got) > 70 || !strings.Contains(got, `"default/web -> 10.244.1.2:80"`) || !strings.HasSuffix(got, "-j KUBE-SEP-MQ4W7Q2CV67URU6Q") {
		t.Errorf("shortenRule(70) = %q", got)
	}
	for n := 8; n < len(rule); n++ {
		if got := shortenRule(rule, n); TextWidth(got) > n {
			t.Errorf("shortenRule(%d) = %q: %d columns", n, got, TextWidth(got))
		}
	}
}

// FitTable never prints a line wider than asked while its columns can still shrink.
func TestFitTableFits(t *testing.T) {
	rows := [][]string{
		{"nat/KUBE-SVC-LOLE4ISW44XBNF3G", "2", `-m comment --comment "default/web -> 10.244.1.2:80" -m statistic --mode random --probability 0.33333333349 -j KUBE-SEP-MQ4W7Q2CV67URU6Q`, "33.33%: jump"},
		{"PREROUTING:"},
		{"nat/KUBE-SEP-MQ4W7Q2CV67URU6Q", "2", `-p tcp -m comment --comment "default/web" -m tcp -j DNAT --to-destination 10.244.1.2:80`, "dnat to 10.244.1.2:80 (a long result that must be cut to fit too)"},
	}
	cols := []Column{{Min: 18, Soft: 20, Shorten: ShortenEnd}, {}, {Min: 24, Soft: 36, Shorten: shortenRule}, {Min: 30, Soft: 40}}
	for width := 80; width <= 200; width += 7 {
		var b bytes.Buffer
		if err := FitTable(&b, width, []string{"TABLE/CHAIN", "#", "RULE", "RESULT"}, rows, cols); err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(b.String()) {
			if w := TextWidth(strings.TrimSuffix(line, "\n")); w > width {
				t.Errorf("width %d: a line of %d columns: %q", width, w, line)
			}
		}
		if !strings.Contains(b.String(), "\nPREROUTING:\n") {
			t.Errorf("width %d: the section line is not a line of its own:\n%s", width, b.String())
		}
	}
}

// A Maglev share is not a random choice: the table says which it is (it said "random").
func TestMaglevShareIsNotRandom(t *testing.T) {
	h := trace.Hop{Table: "cilium_lb4_maglev", Matched: true, Probability: 1.0 / 3, Choice: trace.ChoiceMaglev, Verdict: "backend 2"}
	if got := compactResult(h); got != "Maglev share 33.33%: backend 2" {
		t.Errorf("compact result %q", got)
	}
	if got := result(h); !strings.HasPrefix(got, "Maglev table share (0.33333333333): backend 2") {
		t.Errorf("wide result %q", got)
	}
	h.Choice = ""
	if got := result(h); !strings.HasPrefix(got, "random (") {
		t.Errorf("wide result of a random choice %q", got)
	}
}

// With paths whose replies differ (a local pod answers the bridge address, a remote one the node's), the table
// gives each its reply; it used to print path 1's only.
func TestEveryPathsReply(t *testing.T) {
	tr := &trace.Trace{Dataplane: "iptables", Packet: trace.Packet{Proto: "tcp", Src: "172.18.0.1", Dst: "172.18.0.3:30080", From: "client"}}
	for i, to := range []string{"10.244.1.1:PORT'", "10.244.1.1:PORT'", "172.18.0.3:PORT'"} {
		ep := &trace.Endpoint{IP: fmt.Sprintf("10.244.%d.2", i+1), Port: 80}
		tr.Paths = append(tr.Paths, trace.Path{Probability: 1.0 / 3, Verdict: trace.Delivered, Endpoint: ep,
			Reply: &trace.Reply{From: ep.Addr(), To: to, AsSeenFrom: "172.18.0.3:30080", AsSeenTo: "172.18.0.1:PORT", Text: "reply of " + ep.Addr()}})
	}
	tr.Finish()
	for _, wide := range []bool{false, true} {
		var b bytes.Buffer
		if err := Trace(&b, tr, TraceOptions{Wide: wide}); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		if wide {
			for _, want := range []string{"Reply, path 1: reply of 10.244.1.2:80", "Reply, path 3: reply of 10.244.3.2:80"} {
				if !strings.Contains(out, want) {
					t.Errorf("-o wide lacks %q:\n%s", want, out)
				}
			}
			continue
		}
		for _, want := range []string{"Reply, paths 1 and 2: the pod answers 10.244.1.1:PORT'", "Reply, path 3: the pod answers 172.18.0.3:PORT'"} {
			if !strings.Contains(out, want) {
				t.Errorf("table lacks %q:\n%s", want, out)
			}
		}
	}
}

// A run of hops as in path 1 that begins inside the hook of the lines above and crosses into the next hook gets
// a section line of its own; it used to overwrite the line above it.
func TestFoldedRunKeepsTheLineAbove(t *testing.T) {
	hop := func(hook, chain string, rule int, verdict string) trace.Hop {
		return trace.Hop{Hook: hook, Table: "nat", Chain: chain, Rule: rule, Matched: true, Verdict: verdict, Text: fmt.Sprintf("-A %s rule %d", chain, rule)}
	}
	first := []trace.Hop{hop("PREROUTING", "KUBE-SEP-A", 1, "dnat to 10.244.1.2:80"), hop("PREROUTING", "X", 1, "continue"),
		hop("PREROUTING", "X", 2, "continue"), hop("POSTROUTING", "Y", 1, "accept")}
	mine := []trace.Hop{hop("PREROUTING", "KUBE-SEP-B", 1, "dnat to 10.244.1.3:80"), hop("PREROUTING", "X", 1, "continue"),
		hop("PREROUTING", "X", 2, "continue"), hop("POSTROUTING", "Y", 1, "accept")}
	var b bytes.Buffer
	if err := compactHopTable(&b, mine, first, TraceOptions{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"nat/KUBE-SEP-B", "dnat to 10.244.1.3:80", "PREROUTING, POSTROUTING (from PREROUTING on):", "(3 rules as in path 1)"} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
}

func TestCount(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{{0, "0 replicas"}, {1, "1 replica"}, {2, "2 replicas"}, {-1, "-1 replicas"}} {
		if got := Count(tc.n, "replica"); got != tc.want {
			t.Errorf("Count(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
	if got := Count(int32(1), "connection"); got != "1 connection" {
		t.Errorf("int32: %q", got)
	}
}
