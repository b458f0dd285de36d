package nftables

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
	"github.com/k8sguide/k8sguide/dataplanes/netstate"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// nodeState builds a node's network state from the captured `ip -j addr` and `ip -4 -j route show table all`.
func nodeState(t testing.TB, name string) *netstate.State {
	t.Helper()
	a, err := os.ReadFile("testdata/" + name + ".addr.json")
	if err != nil {
		t.Fatal(err)
	}
	r, err := os.ReadFile("testdata/" + name + ".routes.json")
	if err != nil {
		t.Fatal(err)
	}
	var s netstate.State
	if s.Addresses, err = netstate.ParseAddresses(a); err != nil {
		t.Fatal(err)
	}
	if s.Routes, err = netstate.ParseRoutes(r); err != nil {
		t.Fatal(err)
	}
	return &s
}

// walkFlow walks a packet through rs on state and returns the finished trace.
func walkFlow(t testing.TB, rs *Ruleset, state *netstate.State, src, dst, proto string, origin netfilter.Origin) *trace.Trace {
	t.Helper()
	pkt := trace.Packet{Src: src, Dst: dst, Proto: proto}
	flow, err := pkt.ParseFlow()
	if err != nil {
		t.Fatal(err)
	}
	paths, notes, ct := netfilter.Run([]netfilter.Ruleset{rs}, state, flow, origin, nil)
	tr := &trace.Trace{Dataplane: "nftables", Packet: pkt, Paths: paths, Notes: notes, Conntrack: ct}
	tr.Finish()
	return tr
}

// dump prints a trace for failing tests.
func dump(tr *trace.Trace) string {
	var b strings.Builder
	fmt.Fprintf(&b, "verdict %s snat %s service %s\n", tr.Verdict, tr.SNAT, tr.Service)
	for i, p := range tr.Paths {
		ep := ""
		if p.Endpoint != nil {
			ep = p.Endpoint.Addr()
		}
		fmt.Fprintf(&b, "path %d: p=%.4f %s endpoint=%s snat=%s egress=%s\n", i, p.Probability, p.Verdict, ep, p.SNAT, p.Egress)
		for _, h := range p.Hops {
			fmt.Fprintf(&b, "  %-11s %-40s %2d %-5v %-60s | %s | %s | %v | p=%v svc=%s\n", h.Hook, h.Chain, h.Rule, h.Matched, h.Text, h.Verdict, h.Reason, h.Changes, h.Probability, h.Service)
		}
	}
	for _, n := range tr.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	return b.String()
}

// xtablesCovered is what the tracer hands Leave on a node whose iptables-nft tables the iptables engine walks.
func xtablesCovered() map[string]bool {
	m := map[string]bool{}
	for _, t := range netfilter.XtablesTables {
		m[t] = true
	}
	return m
}
