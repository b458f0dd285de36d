package netfilter

import (
	"fmt"
	"slices"
	"strings"
)

// Creation says when a base chain was created, as nf_tables numbers it: a table's handle counts the tables of
// the network namespace, a chain's handle the objects of its table; both only count up (a table deleted and made
// again gets a new, larger handle). The kernel registers a base chain on its hook when it is created, and of
// base chains of equal priority on a hook it runs the one registered later first (nf_hook_entries_grow,
// net/netfilter/core.c, inserts a new hook before the first one whose priority is not lower; nat chains are
// kept in their nat hook's own list the same way). (Table, Chain) orders creations as long as each table's
// base chains were made with it: a base chain added to a table after a later table was made is newer than
// its handles say, which nothing the kernel reports shows.
//
// The zero value: the input does not say (iptables-legacy tables, dumps without handles).
type Creation struct {
	Table, Chain int
}

// Known says whether the input gave both handles.
func (c Creation) Known() bool { return c.Table > 0 && c.Chain > 0 }

// after says whether c was created after o.
func (c Creation) after(o Creation) bool {
	return c.Table > o.Table || c.Table == o.Table && c.Chain > o.Chain
}

// natHookPriority is the priority of the hook nf_nat registers for a hook (nf_nat_ipv4_ops): every nat chain on
// the hook, whatever its own priority, runs from there, the chains ordered among themselves by their priorities.
func natHookPriority(h Hook) int {
	if h == Prerouting || h == Output {
		return PriorityDstNAT
	}
	return PrioritySrcNAT
}

// placed is a base chain in the order the kernel runs it, with the priority it runs at (a nat chain's is its
// nat hook's).
type placed struct {
	BaseChain
	at int
}

// item is what sits on a hook: a base chain, or the nat hook with its chains.
type item struct {
	chain *BaseChain
	nat   []*group // the nat hook's chains, by priority
	hook  Hook
	at    int
}

// created is the item's creation: a chain's own; the nat hook's, that of its earliest nat chain (nf_nat
// registers its hooks with the namespace's first nat chain and keeps them while any is left: they may be older
// still, if the first nat chains are gone); ok is false when the input does not say.
func (it item) created() (Creation, bool) {
	if it.chain != nil {
		return it.chain.Created, it.chain.Created.Known()
	}
	var first Creation
	for _, g := range it.nat {
		for _, n := range g.items {
			if n.chain.StandIn {
				continue
			}
			if !n.chain.Created.Known() {
				return Creation{}, false
			}
			if !first.Known() || first.after(n.chain.Created) {
				first = n.chain.Created
			}
		}
	}
	return first, first.Known()
}

// standIn says whether the item stands for rules the input lacks only (see BaseChain.StandIn).
func (it item) standIn() bool {
	if it.chain != nil {
		return it.chain.StandIn
	}
	for _, g := range it.nat {
		for _, n := range g.items {
			if !n.chain.StandIn {
				return false
			}
		}
	}
	return true
}

// name names the item for the reader: "nat/PREROUTING", "ip kube-proxy/nat-prerouting", "the nat chains
// (nat/PREROUTING, …)".
func (it item) name() string {
	if it.chain != nil {
		return chainName(*it.chain)
	}
	var names []string
	for _, g := range it.nat {
		for _, n := range g.items {
			if !n.chain.StandIn {
				names = append(names, chainName(*n.chain))
			}
		}
	}
	return "the nat chains (" + strings.Join(names, ", ") + ")"
}

// why says why the input does not tell when the item's chains were created.
func (it item) why() []string {
	var out []string
	add := func(c *BaseChain) {
		if c.StandIn || c.Created.Known() {
			return
		}
		w := c.OrderUnknown
		if w == "" {
			w = "the input does not number its chains"
		}
		out = append(out, chainName(*c)+": "+w)
	}
	if it.chain != nil {
		add(it.chain)
	}
	for _, g := range it.nat {
		for _, n := range g.items {
			add(n.chain)
		}
	}
	return out
}

func chainName(c BaseChain) string {
	if c.Table == "" {
		return c.Name
	}
	return c.Table + "/" + c.Name
}

// group is items of equal priority on one hook, in the order walked.
type group struct {
	items []item
	// alts are the other orders the input allows (it does not say when some of the items were created); pick
	// chooses the one flatten follows (0: items).
	alts [][]item
	pick int
}

func (g *group) chosen() []item {
	if g.pick == 0 {
		return g.items
	}
	return g.alts[g.pick-1]
}

// plan is the base chains of every hook, grouped as the kernel orders them.
type plan struct {
	hooks [][]*group
	// open are the groups whose order the input does not settle.
	open []*group
}

// maxOrders bounds the orders of one group of equal-priority chains that are walked.
const maxOrders = 24

// order groups base chains as the kernel runs them: by priority (a nat chain at its nat hook's), and, among
// chains of equal priority, the later created first. Chains whose creation the input does not say keep their
// places (rulesets, then their tables, in the order given) and make their group open: the kernel may run them
// in another order.
func order(chains []BaseChain) *plan {
	p := &plan{}
	var hooks []Hook
	items := map[Hook][]item{}
	nat := map[Hook][]item{}
	for i := range chains {
		c := &chains[i]
		if !slices.Contains(hooks, c.Hook) {
			hooks = append(hooks, c.Hook)
		}
		if c.NAT {
			if len(nat[c.Hook]) == 0 {
				// The nat hook, where the first nat chain is (its chains are added below).
				items[c.Hook] = append(items[c.Hook], item{hook: c.Hook, at: natHookPriority(c.Hook)})
			}
			nat[c.Hook] = append(nat[c.Hook], item{chain: c, hook: c.Hook, at: c.Priority})
			continue
		}
		items[c.Hook] = append(items[c.Hook], item{chain: c, hook: c.Hook, at: c.Priority})
	}
	for _, h := range hooks {
		its := items[h]
		for k := range its {
			if its[k].chain == nil {
				its[k].nat = p.groups(nat[h])
			}
		}
		p.hooks = append(p.hooks, p.groups(its))
	}
	return p
}

// groups sorts one hook's items (or one nat hook's chains) by priority, stably, and orders each run of equal
// priority.
func (p *plan) groups(items []item) []*group {
	slices.SortStableFunc(items, func(a, b item) int { return a.at - b.at })
	var out []*group
	for i := 0; i < len(items); {
		j := i + 1
		for j < len(items) && items[j].at == items[i].at {
			j++
		}
		g := &group{items: settle(items[i:j])}
		if g.alts = others(g.items); len(g.alts) > 0 {
			p.open = append(p.open, g)
		}
		out = append(out, g)
		i = j
	}
	return out
}

// settle orders items of equal priority: those whose creation is known take the places of the known ones, the
// latest created first; the others (and stand-ins) keep their places.
func settle(items []item) []item {
	out := slices.Clone(items)
	var places []int
	var known []item
	for i, it := range out {
		if _, ok := it.created(); ok && !it.standIn() {
			places = append(places, i)
			known = append(known, it)
		}
	}
	slices.SortStableFunc(known, func(a, b item) int {
		ca, _ := a.created()
		cb, _ := b.created()
		switch {
		case ca.after(cb):
			return -1
		case cb.after(ca):
			return 1
		}
		return 0
	})
	for k, i := range places {
		out[i] = known[k]
	}
	return out
}

// others are the orders of a settled group, other than its own, that the input allows: stand-ins stay where
// they are, chains of known creation keep their order among themselves, and a chain of unknown creation may be
// anywhere. None when at most one real chain is in the group or every creation is known.
func others(items []item) [][]item {
	var places []int
	var real []item
	open := false
	for i, it := range items {
		if it.standIn() {
			continue
		}
		places = append(places, i)
		real = append(real, it)
		if _, ok := it.created(); !ok {
			open = true
		}
	}
	if !open || len(real) < 2 {
		return nil
	}
	var out [][]item
	idx := make([]int, len(real))
	for i := range idx {
		idx[i] = i
	}
	// Permutations in lexicographic order; the first is the walked order itself. Only so many are tried: a
	// dozen chains of one priority on one hook, of which most have a known creation, is not a node's ruleset.
	for tried := 0; tried < 100_000 && next(idx) && len(out) < maxOrders; tried++ {
		if !allowed(real, idx) {
			continue
		}
		o := slices.Clone(items)
		for k, i := range places {
			o[i] = real[idx[k]]
		}
		out = append(out, o)
	}
	return out
}

// allowed says whether a permutation keeps chains of known creation in the kernel's order.
func allowed(real []item, idx []int) bool {
	var last Creation
	for _, i := range idx {
		c, ok := real[i].created()
		if !ok {
			continue
		}
		if last.Known() && c.after(last) {
			return false
		}
		last = c
	}
	return true
}

// next advances idx to the next permutation in lexicographic order; false after the last.
func next(idx []int) bool {
	i := len(idx) - 2
	for i >= 0 && idx[i] >= idx[i+1] {
		i--
	}
	if i < 0 {
		return false
	}
	j := len(idx) - 1
	for idx[j] <= idx[i] {
		j--
	}
	idx[i], idx[j] = idx[j], idx[i]
	slices.Reverse(idx[i+1:])
	return true
}

// flatten lists the base chains in the order of each group's pick.
func (p *plan) flatten() []placed {
	var out []placed
	for _, groups := range p.hooks {
		for _, g := range groups {
			for _, it := range g.chosen() {
				if it.chain != nil {
					out = append(out, placed{*it.chain, it.at})
					continue
				}
				for _, ng := range it.nat {
					for _, n := range ng.chosen() {
						out = append(out, placed{*n.chain, it.at})
					}
				}
			}
		}
	}
	return out
}

// describe names a group's chains in the order walked, their priority and hook, and why their order is not
// known.
func (g *group) describe() (names, where, why string) {
	var n, w []string
	for _, it := range g.items {
		if it.standIn() {
			continue
		}
		n = append(n, it.name())
		for _, r := range it.why() {
			if !slices.Contains(w, r) {
				w = append(w, r)
			}
		}
	}
	first := g.items[0]
	prio := first.at
	if first.chain != nil && first.chain.NAT {
		where = fmt.Sprintf("priority %d among the nat chains of hook %s", prio, first.hook)
	} else {
		where = fmt.Sprintf("priority %d at hook %s", prio, first.hook)
	}
	return joinAnd(n), where, strings.Join(w, "; ")
}

func joinAnd(s []string) string {
	if len(s) <= 1 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}
