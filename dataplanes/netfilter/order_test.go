package netfilter

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// fixed is a ruleset of the base chains given.
type fixed []BaseChain

func (f fixed) BaseChains() []BaseChain { return f }

// chain is a base chain that records one hop and, when dnat is set, translates the destination to it.
func chain(hook Hook, prio int, table, name string, created Creation, nat bool, dnat string) BaseChain {
	return BaseChain{Hook: hook, Priority: prio, Table: table, Name: name, NAT: nat, Created: created,
		Run: func(w *Walk) Verdict {
			h := trace.Hop{Table: table, Chain: name, Rule: 1, Text: "counter", Matched: true, Verdict: "continue"}
			if dnat != "" {
				h.Text, h.Verdict = "dnat to "+dnat, "dnat to "+dnat
				h.Changes = append(h.Changes, w.DNAT(netip.MustParseAddrPort(dnat)))
			}
			w.Add(h)
			return Accept
		}}
}

// order of the hops of a walk at one hook: "table/chain".
func hopsAt(p trace.Path, hook Hook) []string {
	var out []string
	for _, h := range p.Hops {
		if h.Hook == string(hook) {
			out = append(out, h.Table+"/"+h.Chain)
		}
	}
	return out
}

func runOne(t *testing.T, rulesets ...Ruleset) ([]trace.Path, []string) {
	t.Helper()
	n := node()
	flow := trace.Flow{Src: netip.MustParseAddr("172.18.0.1"), Dst: netip.MustParseAddr("172.18.0.3"), Sport: 40001, Dport: 30080, Proto: "tcp"}
	paths, notes, _ := Run(rulesets, n, flow, Origin{Iif: "eth0"}, nil)
	if len(paths) == 0 {
		t.Fatal("no path")
	}
	return paths, notes
}

// Of base chains of equal priority on a hook, the kernel runs the one created later first
// (nf_hook_entries_grow); creation is (table handle, chain handle). Whatever the order the rulesets come in.
func TestEqualPriorityLaterCreatedFirst(t *testing.T) {
	first := chain(Prerouting, 0, "ip first", "pre", Creation{2, 1}, false, "")
	second := chain(Prerouting, 0, "ip second", "pre", Creation{9, 1}, false, "")
	sameTableLater := chain(Prerouting, 0, "ip first", "pre2", Creation{2, 7}, false, "")
	for _, in := range [][]BaseChain{{first, second, sameTableLater}, {sameTableLater, second, first}, {second, first, sameTableLater}} {
		paths, notes := runOne(t, fixed(in))
		want := []string{"ip second/pre", "ip first/pre2", "ip first/pre"}
		if got := hopsAt(paths[0], Prerouting); !slices.Equal(got, want) {
			t.Errorf("given %v %v %v: walked %v, want %v", in[0].Name, in[1].Table, in[2].Name, got, want)
		}
		if len(notes) != 0 {
			t.Errorf("a known order needs no note: %v", notes)
		}
	}
}

// kind's node in nftables mode: iptables-nft's nat table (handle 2, made at boot) and kube-proxy's table (handle
// 9). kube-proxy's nat-prerouting runs first and makes the NAT binding: iptables' nat PREROUTING is not
// evaluated for the flow. Likewise at POSTROUTING kube-proxy's nat-postrouting comes before nat/POSTROUTING.
func TestKubeProxyNATBeforeIptablesNAT(t *testing.T) {
	iptNAT := chain(Prerouting, PriorityDstNAT, "nat", "PREROUTING", Creation{2, 1}, true, "10.244.9.9:80")
	iptPost := chain(Postrouting, PrioritySrcNAT, "nat", "POSTROUTING", Creation{2, 4}, true, "")
	kpNAT := chain(Prerouting, PriorityDstNAT, "ip kube-proxy", "nat-prerouting", Creation{9, 20}, true, "10.244.1.5:80")
	kpPost := chain(Postrouting, PrioritySrcNAT, "ip kube-proxy", "nat-postrouting", Creation{9, 22}, true, "")
	paths, notes := runOne(t, fixed{iptNAT, iptPost}, fixed{kpNAT, kpPost})
	p := paths[0]
	if got := hopsAt(p, Prerouting); !slices.Equal(got, []string{"ip kube-proxy/nat-prerouting"}) {
		t.Errorf("PREROUTING %v: kube-proxy's nat chain runs first, and iptables' nat chain is skipped once it translated", got)
	}
	if p.Endpoint == nil || p.Endpoint.Addr() != "10.244.1.5:80" {
		t.Errorf("endpoint %+v, want kube-proxy's 10.244.1.5:80", p.Endpoint)
	}
	if got := hopsAt(p, Postrouting); !slices.Equal(got, []string{"ip kube-proxy/nat-postrouting", "nat/POSTROUTING"}) {
		t.Errorf("POSTROUTING %v", got)
	}
	if len(notes) != 0 {
		t.Errorf("notes %v", notes)
	}
	// Made the other way round (iptables' table deleted and made again after kube-proxy's), iptables wins.
	iptNAT.Created, iptPost.Created = Creation{12, 1}, Creation{12, 4}
	paths, _ = runOne(t, fixed{iptNAT, iptPost}, fixed{kpNAT, kpPost})
	if got := hopsAt(paths[0], Prerouting); !slices.Equal(got, []string{"nat/PREROUTING"}) || paths[0].Endpoint.Addr() != "10.244.9.9:80" {
		t.Errorf("iptables' nat table made last: PREROUTING %v, endpoint %+v", got, paths[0].Endpoint)
	}
}

// A nat chain runs from nf_nat's hook for its hook (priority dstnat at PREROUTING), whatever its own priority:
// a nat chain of priority -110 comes after a filter chain of priority -105 (measured on Linux 6.18).
func TestNATChainsRunAtTheNATHook(t *testing.T) {
	nat := chain(Prerouting, -110, "ip t", "n", Creation{2, 1}, true, "")
	filter := chain(Prerouting, -105, "ip t", "f", Creation{2, 2}, false, "")
	late := chain(Prerouting, -90, "ip t", "late", Creation{2, 3}, true, "")
	paths, _ := runOne(t, fixed{late, nat, filter})
	if got, want := hopsAt(paths[0], Prerouting), []string{"ip t/f", "ip t/n", "ip t/late"}; !slices.Equal(got, want) {
		t.Errorf("walked %v, want %v", got, want)
	}
}

// When the input does not say which of two chains of equal priority was made first and the order decides the
// outcome (which nat chain translates), every path is unknown and says why.
func TestUnknownOrderThatDecides(t *testing.T) {
	legacy := chain(Prerouting, PriorityDstNAT, "nat", "PREROUTING", Creation{}, true, "10.244.9.9:80")
	legacy.OrderUnknown = "an iptables-legacy chain"
	kp := chain(Prerouting, PriorityDstNAT, "ip kube-proxy", "nat-prerouting", Creation{9, 3}, true, "10.244.1.5:80")
	paths, _ := runOne(t, fixed{legacy}, fixed{kp})
	for _, p := range paths {
		if p.Verdict != trace.Unknown || p.Endpoint != nil {
			t.Errorf("verdict %s endpoint %+v, want unknown", p.Verdict, p.Endpoint)
		}
		m := strings.Join(p.Missing, "\n")
		t.Log(m)
		for _, w := range []string{"nat/PREROUTING", "ip kube-proxy/nat-prerouting", "an iptables-legacy chain", "created last first"} {
			if !strings.Contains(m, w) {
				t.Errorf("missing %q does not say %q", m, w)
			}
		}
	}
}

// When only the rules' order depends on it (two counting chains), the walk keeps the order given and a note
// says the order is not known.
func TestUnknownOrderOnlyHops(t *testing.T) {
	a := chain(Prerouting, 0, "filter", "PREROUTING", Creation{}, false, "")
	a.OrderUnknown = "an iptables-legacy chain"
	b := chain(Prerouting, 0, "ip kube-proxy", "filter-prerouting", Creation{9, 3}, false, "")
	paths, notes := runOne(t, fixed{a}, fixed{b})
	if got := hopsAt(paths[0], Prerouting); !slices.Equal(got, []string{"filter/PREROUTING", "ip kube-proxy/filter-prerouting"}) {
		t.Errorf("walked %v: an unknown order keeps the order given", got)
	}
	if paths[0].Verdict != trace.Local || len(paths[0].Missing) != 0 {
		t.Errorf("the outcome does not depend on the order: %s %v", paths[0].Verdict, paths[0].Missing)
	}
	n := strings.Join(notes, "\n")
	t.Log(n)
	if !strings.Contains(n, "filter/PREROUTING and ip kube-proxy/filter-prerouting") || !strings.Contains(n, "not its outcome") {
		t.Errorf("notes %q", n)
	}
	// The same chains at different priorities, or both of known creation: nothing to say.
	b.Priority = 5
	if _, notes = runOne(t, fixed{a}, fixed{b}); len(notes) != 0 {
		t.Errorf("different priorities: notes %v", notes)
	}
}

// Chains of unknown creation keep their places; the known ones fill theirs, latest first; the other orders the
// input allows keep the known ones in that order; stand-ins stay put and open nothing.
func TestSettleAndOthers(t *testing.T) {
	mk := func(name string, c Creation) BaseChain { return chain(Prerouting, 0, "t", name, c, false, "") }
	in := []BaseChain{mk("old", Creation{2, 1}), mk("unknown", Creation{}), mk("new", Creation{9, 1})}
	p := order(in)
	var got []string
	for _, c := range p.flatten() {
		got = append(got, c.Name)
	}
	if want := []string{"new", "unknown", "old"}; !slices.Equal(got, want) {
		t.Errorf("settled %v, want %v", got, want)
	}
	if len(p.open) != 1 {
		t.Fatalf("open groups %d, want 1", len(p.open))
	}
	var alts []string
	for _, a := range p.open[0].alts {
		var names []string
		for _, it := range a {
			names = append(names, it.chain.Name)
		}
		alts = append(alts, strings.Join(names, ","))
	}
	if want := []string{"unknown,new,old", "new,old,unknown"}; !slices.Equal(sortedCopy(alts), sortedCopy(want)) {
		t.Errorf("other orders %v, want %v", alts, want)
	}
	stand := mk("stand-in", Creation{})
	stand.StandIn = true
	if p := order([]BaseChain{stand, mk("a", Creation{2, 1})}); len(p.open) != 0 {
		t.Errorf("a stand-in opens no order")
	}
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}
