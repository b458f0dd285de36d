package nftables

import (
	"slices"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// The semantics fixture (testdata/semantics.nft) is a hand-written table loaded into a scratch namespace
// to get nft's own JSON for statements kube-proxy does not write. It is walked on the t2-worker state.

func semantics(t *testing.T) func(src, dst, proto string, o netfilter.Origin) *trace.Trace {
	rs := loadFixture(t, "semantics", true)
	st := nodeState(t, "nftables-worker")
	return func(src, dst, proto string, o netfilter.Origin) *trace.Trace {
		return walkFlow(t, rs, st, src, dst, proto, o)
	}
}

func hasNote(tr *trace.Trace, sub string) bool {
	for _, n := range tr.Notes {
		if strings.Contains(n, sub) {
			return true
		}
	}
	return false
}

// TestSemanticsJumpsMarksRandom: jump and return, masks on marks, a random match of chance 1/4, a map
// lookup for dnat, goto whose chain ends (the base chain's policy applies), snat.
func TestSemanticsJumpsMarksRandom(t *testing.T) {
	walk := semantics(t)
	tr := walk("10.1.2.3:40000", "172.18.0.3:8080", "tcp", netfilter.Origin{Iif: "eth0"})
	if len(tr.Paths) != 2 {
		t.Fatalf("%s", dump(tr))
	}
	lucky, unlucky := tr.Paths[1], tr.Paths[0] // most likely first
	if lucky.Probability != 0.25 || unlucky.Probability != 0.75 {
		t.Fatalf("probabilities %v %v:\n%s", lucky.Probability, unlucky.Probability, dump(tr))
	}
	// jump sub, whose `iifname "eth*" return` comes back to rule 2 of pre.
	if h := hopOf(lucky, "sub", 1); h == nil || !h.Matched || h.Verdict != "return" {
		t.Errorf("sub rule 1 %+v", h)
	}
	wantReason(t, lucky, "pre", 3, "the packet is tcp, not udp")
	wantReason(t, lucky, "pre", 4, "ct state is new, not established,related")
	if h := hopOf(lucky, "pre", 5); h == nil || !h.Matched || len(h.Changes) != 1 || h.Changes[0] != "mark 0x1 -> 0x20" {
		t.Errorf("pre rule 5 %+v", h)
	}
	if h := hopOf(lucky, "pre", 6); h == nil || !h.Matched || h.Probability != 0.25 || h.Changes[0] != "mark 0x20 -> 0x120" {
		t.Errorf("pre rule 6 %+v", h)
	}
	if h := hopOf(unlucky, "pre", 6); h == nil || h.Matched || h.Probability != 0.25 || h.Reason != "numgen random mod 4 chose a value that does not match (chance 3/4)" {
		t.Errorf("pre rule 6 (not chosen) %+v", h)
	}
	if !hasNote(tr, "limit rate 10/second") {
		t.Errorf("no note for the rate limit: %q", tr.Notes)
	}
	if hasNote(tr, "source port") {
		t.Errorf("the source port is known: %q", tr.Notes)
	}
	// dnat through @m2 (ip daddr . tcp dport → 10.244.1.3 . 80).
	for _, p := range tr.Paths {
		if h := hopOf(p, "nat-pre", 1); h == nil || !h.Matched || h.Verdict != "dnat to 10.244.1.3:80" {
			t.Errorf("dnat hop %+v", h)
		}
	}
	// forward-1 goto forward-2: accepted only with mark 0x120; otherwise forward-2 ends and the policy of
	// forward-1 (drop) applies.
	if lucky.Verdict != trace.Delivered || lucky.SNAT != "172.18.0.3" {
		t.Errorf("lucky path: %s", dump(tr))
	}
	if unlucky.Verdict != trace.Dropped || unlucky.VerdictBy == nil || unlucky.VerdictBy.Chain != "forward-1" || unlucky.VerdictBy.Rule != 0 {
		t.Errorf("unlucky path: %s", dump(tr))
	}
	wantReason(t, unlucky, "forward-2", 1, "meta mark is 0x00000020, not 0x00000120")
}

// TestSemanticsUnknownSourcePort: a condition on the source port is assumed, and said so.
func TestSemanticsUnknownSourcePort(t *testing.T) {
	walk := semantics(t)
	tr := walk("10.1.2.3", "172.18.0.3:8080", "tcp", netfilter.Origin{Iif: "eth0"})
	if !hasNote(tr, "the trace assumed `tcp sport 1024-65535` matches: the source port is not known") {
		t.Errorf("notes %q", tr.Notes)
	}
	if h := hopOf(tr.Paths[0], "pre", 2); h == nil || !h.Matched {
		t.Errorf("pre rule 2 %+v", h)
	}
}

// TestSemanticsDropAndPolicy: a rule dropping udp; a source outside the forward chain's sets meets its
// policy.
func TestSemanticsDropAndPolicy(t *testing.T) {
	walk := semantics(t)
	tr := walk("10.1.2.3", "172.18.0.3:53", "udp", netfilter.Origin{Iif: "eth0"})
	if tr.Verdict != trace.Dropped || tr.Paths[0].VerdictBy == nil || tr.Paths[0].VerdictBy.Chain != "pre" || tr.Paths[0].VerdictBy.Rule != 3 {
		t.Fatalf("%s", dump(tr))
	}
	// From a pod: sub's return does not match cni0, so sub drops.
	tr = walk("10.244.1.2", "172.18.0.3:8080", "tcp", netfilter.Origin{Iif: "cni0"})
	if tr.Verdict != trace.Dropped || tr.Paths[0].VerdictBy.Chain != "sub" {
		t.Fatalf("%s", dump(tr))
	}
	wantReason(t, tr.Paths[0], "sub", 1, `iifname is "cni0", not "eth*"`)
}

// TestSemanticsRedirect: redirect sends the packet to the incoming interface's address; ct status dnat
// then holds.
func TestSemanticsRedirect(t *testing.T) {
	walk := semantics(t)
	tr := walk("10.1.2.3:40000", "172.18.0.3:9090", "tcp", netfilter.Origin{Iif: "eth0"})
	if tr.Verdict != trace.Local {
		t.Fatalf("%s", dump(tr))
	}
	for _, p := range tr.Paths {
		if h := hopOf(p, "nat-pre", 2); h == nil || h.Verdict != "redirect to 172.18.0.3:80" {
			t.Errorf("redirect hop %+v", h)
		}
		if h := hopOf(p, "input-1", 1); h == nil || !h.Matched || h.Verdict != "accept" {
			t.Errorf("input hop %+v", h)
		}
	}
}

// TestWalkMalformed: loops, missing chains and sets, statements the tracer does not know: the walk ends, says
// what it assumed, and never panics.
func TestWalkMalformed(t *testing.T) {
	js := `{"nftables": [
	{"table": {"family": "ip", "name": "t", "handle": 1}},
	{"table": {"family": "ip6", "name": "six", "handle": 2}},
	{"chain": {"family": "ip6", "table": "six", "name": "p", "type": "filter", "hook": "prerouting", "prio": 0, "policy": "drop"}},
	{"chain": {"family": "ip", "table": "t", "name": "p", "type": "filter", "hook": "prerouting", "prio": 0, "policy": "accept"}},
	{"chain": {"family": "ip", "table": "t", "name": "a"}},
	{"chain": {"family": "ip", "table": "t", "name": "b"}},
	{"rule": {"family": "ip", "table": "t", "chain": "p", "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "saddr"}}, "right": "@nosuchset"}}]}},
	{"rule": {"family": "ip", "table": "t", "chain": "p", "expr": [{"frobnicate": {"x": 1}}, {"xt": {"type": "match", "name": "comment"}}]}},
	{"rule": {"family": "ip", "table": "t", "chain": "p", "expr": [{"match": {"op": "==", "left": {"meta": {"key": "skuid"}}, "right": 0}}, {"vmap": {"key": {"numgen": {"mode": "random", "mod": 4, "offset": 0}}, "data": {"set": [[0, {"accept": null}], [{"range": [1, 2]}, {"jump": {"target": "a"}}]]}}}]}},
	{"rule": {"family": "ip", "table": "t", "chain": "a", "expr": [{"goto": {"target": "b"}}]}},
	{"rule": {"family": "ip", "table": "t", "chain": "b", "expr": [{"jump": {"target": "a"}}]}}
	]}`
	rs, err := ParseRuleset([]byte(js), "")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(rs.BaseChains()); n != 1 {
		t.Errorf("%d base chains: the ip6 table must not walk", n)
	}
	tr := walkFlow(t, rs, nodeState(t, "nftables-worker"), "1.2.3.4", "172.18.0.3:80", "tcp", netfilter.Origin{Iif: "eth0"})
	// numgen mod 4: 0 accepts (1/4), 1-2 jump into the a/b loop (1/2: the kernel refuses to load such a
	// ruleset, so where it goes is unknown), 3 is in no element (1/4).
	if len(tr.Paths) != 3 {
		t.Fatalf("%s", dump(tr))
	}
	probs := map[string]float64{}
	for _, p := range tr.Paths {
		probs[p.Verdict] += p.Probability
	}
	if probs[trace.Local] != 0.5 || probs[trace.Unknown] != 0.5 || tr.Verdict != trace.Unknown {
		t.Errorf("verdict %s, chances by verdict %v", tr.Verdict, probs)
	}
	for _, want := range []string{"no set @nosuchset", "does not understand", "iptables-nft extension", "meta skuid is not modelled"} {
		if !hasNote(tr, want) {
			t.Errorf("no note with %q: %q", want, tr.Notes)
		}
	}
	// The walk names the loop itself (it used to go on until 16 chains deep).
	if !slices.ContainsFunc(tr.Missing, func(m string) bool { return strings.Contains(m, "jumps in a circle (a -> b -> a)") }) {
		t.Errorf("missing %q", tr.Missing)
	}
	for _, p := range tr.Paths {
		if len(p.Hops) > 100000 {
			t.Errorf("%d hops", len(p.Hops))
		}
	}
}

// TestWalkGotoLoop: a loop of gotos (the kernel refuses to load one) stops where it closes, naming it.
func TestWalkGotoLoop(t *testing.T) {
	js := `{"nftables": [
	{"table": {"family": "ip", "name": "t"}},
	{"chain": {"family": "ip", "table": "t", "name": "p", "type": "filter", "hook": "prerouting", "prio": 0, "policy": "accept"}},
	{"chain": {"family": "ip", "table": "t", "name": "a"}},
	{"chain": {"family": "ip", "table": "t", "name": "b"}},
	{"rule": {"family": "ip", "table": "t", "chain": "p", "expr": [{"goto": {"target": "a"}}]}},
	{"rule": {"family": "ip", "table": "t", "chain": "a", "expr": [{"counter": null}, {"goto": {"target": "b"}}]}},
	{"rule": {"family": "ip", "table": "t", "chain": "b", "expr": [{"goto": {"target": "a"}}]}}
	]}`
	rs, err := ParseRuleset([]byte(js), "")
	if err != nil {
		t.Fatal(err)
	}
	tr := walkFlow(t, rs, nodeState(t, "nftables-worker"), "1.2.3.4", "172.18.0.3:80", "tcp", netfilter.Origin{Iif: "eth0"})
	if len(tr.Paths) != 1 || tr.Verdict != trace.Unknown || len(tr.Missing) != 1 || !strings.Contains(tr.Missing[0], "jumps in a circle (a -> b -> a)") || len(tr.Paths[0].Hops) > 3 {
		t.Fatalf("verdict %s, missing %q", tr.Verdict, tr.Missing)
	}
}

// TestWalkMissingChain: a jump to a chain the input does not have (a pasted part of a ruleset) ends the path as
// unknown, naming the chain and the rule, instead of going on as if the chain returned.
func TestWalkMissingChain(t *testing.T) {
	js := `{"nftables": [
	{"table": {"family": "ip", "name": "t"}},
	{"chain": {"family": "ip", "table": "t", "name": "p", "type": "nat", "hook": "prerouting", "prio": -100, "policy": "accept"}},
	{"rule": {"family": "ip", "table": "t", "chain": "p", "expr": [{"jump": {"target": "services"}}]}},
	{"rule": {"family": "ip", "table": "t", "chain": "p", "expr": [{"dnat": {"addr": "10.0.0.9", "port": 80}}]}}
	]}`
	rs, err := ParseRuleset([]byte(js), "")
	if err != nil {
		t.Fatal(err)
	}
	tr := walkFlow(t, rs, nodeState(t, "nftables-worker"), "1.2.3.4", "172.18.0.3:80", "tcp", netfilter.Origin{Iif: "eth0"})
	if tr.Verdict != trace.Unknown || len(tr.Endpoints) != 0 || len(tr.Missing) != 1 || !strings.Contains(tr.Missing[0], "chain ip t services (ip t p #1 jumps to it") {
		t.Fatalf("verdict %s, endpoints %v, missing %q", tr.Verdict, tr.Endpoints, tr.Missing)
	}
}
