package render

import (
	"fmt"
	"io"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// Connections prints what connections to dst from `from` did: a line per pod that answered (how many, and the
// source addresses it saw, each with its count: the ports are the client's ephemeral ones, one per connection,
// and -o json keeps them) and one per kind of failure, fitted to w's width.
func Connections(w io.Writer, from, dst string, conns []trace.Connection) error {
	type seen struct {
		n       int
		sources map[string]int
	}
	pods := map[string]*seen{}
	errs := map[string]int{}
	var errOrder []string
	answered := 0
	for _, c := range conns {
		if !c.Answered {
			if errs[c.Error] == 0 {
				errOrder = append(errOrder, c.Error)
			}
			errs[c.Error]++
			continue
		}
		answered++
		s := pods[c.Pod]
		if s == nil {
			s = &seen{sources: map[string]int{}}
			pods[c.Pod] = s
		}
		s.n++
		addr := c.Client
		if ap, err := netip.ParseAddrPort(c.Client); err == nil {
			addr = ap.Addr().String()
		}
		s.sources[addr]++
	}
	fmt.Fprintf(w, "%d of %s to %s from %s answered\n", answered, Count(len(conns), "connection"), dst, strings.TrimSpace(from))
	names := make([]string, 0, len(pods))
	for n := range pods {
		names = append(names, n)
	}
	slices.Sort(names)
	rows := [][]string{}
	for _, n := range names {
		addrs := slices.Sorted(maps.Keys(pods[n].sources))
		srcs := make([]string, len(addrs))
		for i, a := range addrs {
			srcs[i] = fmt.Sprintf("%s×%d", a, pods[n].sources[a])
		}
		rows = append(rows, []string{n, fmt.Sprint(pods[n].n), strings.Join(srcs, " ")})
	}
	for _, e := range errOrder {
		rows = append(rows, []string{"(no answer)", fmt.Sprint(errs[e]), e})
	}
	return FitTable(w, Width(w), []string{"POD", "CONNECTIONS", "SOURCE THE POD SAW"}, rows, []Column{{Min: 12}, {}, {Min: 20, Shorten: ShortenEnd}})
}
