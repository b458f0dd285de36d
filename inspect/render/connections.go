package render

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/lab"
)

// Connections prints what connections to dst from `from` did: a line per pod that answered (how many, the sources
// it saw) and one per kind of failure.
func Connections(w io.Writer, from, dst string, conns []trace.Connection) error {
	type seen struct {
		n       int
		sources []string
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
			s = &seen{}
			pods[c.Pod] = s
		}
		s.n++
		if !slices.Contains(s.sources, c.Client) {
			s.sources = append(s.sources, c.Client)
		}
	}
	fmt.Fprintf(w, "%d of %s to %s from %s answered\n", answered, lab.Count(len(conns), "connection"), dst, strings.TrimSpace(from))
	names := make([]string, 0, len(pods))
	for n := range pods {
		names = append(names, n)
	}
	slices.Sort(names)
	rows := [][]string{}
	for _, n := range names {
		srcs := pods[n].sources
		if len(srcs) > 3 {
			srcs = append(srcs[:3:3], fmt.Sprintf("… (%d in all)", len(pods[n].sources)))
		}
		rows = append(rows, []string{n, fmt.Sprint(pods[n].n), strings.Join(srcs, ", ")})
	}
	for _, e := range errOrder {
		rows = append(rows, []string{"(no answer)", fmt.Sprint(errs[e]), e})
	}
	return WriteTable(w, []string{"POD", "CONNECTIONS", "SOURCE THE POD SAW"}, rows)
}
