package render

import (
	"fmt"
	"io"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// WriteCounted prints a counted run within width columns: the endpoints with the trace's chance and the pods'
// answers, then (iptables) the choice rules with their own chances and the kernel's counts, then the verdict.
func WriteCounted(w io.Writer, width int, c *trace.Counted) error {
	var b strings.Builder
	b.WriteString(Wrap("", "", fmt.Sprintf("%d of %d connections from the client to %s answered; the trace on %s (%s) beside them:", c.Answered, c.Made, c.Dst, c.Node, c.Dataplane), width))
	rows := [][]string{}
	header := []string{"ENDPOINT", "CHANCE", "EXPECTED", "ANSWERED", "SHARE"}
	conntrack := len(c.Endpoints) > 0 && c.Endpoints[0].Conntrack != nil
	if conntrack {
		header = append(header, "CONNTRACK")
	}
	for _, e := range c.Endpoints {
		name := e.Endpoint.Pod
		if name == "" {
			name = fmt.Sprintf("%s:%d", e.Endpoint.IP, e.Endpoint.Port)
		}
		share := "-"
		if c.Answered > 0 {
			share = fmt.Sprintf("%.3f", float64(e.Answered)/float64(c.Answered))
		}
		row := []string{name, fmt.Sprintf("%.3f", e.Endpoint.Probability), fmt.Sprintf("%.1f", e.Endpoint.Probability*float64(c.Answered)), fmt.Sprint(e.Answered), share}
		if conntrack && e.Conntrack != nil {
			row = append(row, fmt.Sprint(*e.Conntrack))
		}
		rows = append(rows, row)
	}
	if err := FitTable(&b, width, header, rows, []Column{{Min: 16}}); err != nil {
		return err
	}
	if conntrack && c.ConntrackRecord != "" {
		b.WriteString(Wrap("", "", "CONNTRACK: "+c.ConntrackRecord+" (the kernel's own record of each choice).", width))
	}
	if len(c.Rules) > 0 {
		b.WriteString("\n" + Wrap("", "", fmt.Sprintf("The choice, rule by rule (%s, nat table), with the kernel's packet counters for this run:", c.Rules[0].Chain), width))
		rows = rows[:0]
		for _, r := range c.Rules {
			chance := fmt.Sprintf("%.5f", r.Chance)
			if r.Chance == 1 {
				chance = "the rest"
			}
			share := "-"
			if r.Reached > 0 {
				share = fmt.Sprintf("%.3f", float64(r.Counted())/float64(r.Reached))
			}
			rows = append(rows, []string{fmt.Sprint(r.Rule), chance, fmt.Sprintf("%d of %d", r.Counted(), r.Reached), share, r.Endpoint})
		}
		if err := FitTable(&b, width, []string{"RULE", "ITS CHANCE", "MATCHED", "SHARE", "SENDS TO"}, rows, []Column{{}, {}, {}, {}, {Min: 16}}); err != nil {
			return err
		}
	}
	for _, n := range c.Notes {
		b.WriteString(Wrap("  -", "    ", n, width))
	}
	b.WriteString("\n" + Wrap("", "", "Verdict: "+c.Verdict+".", width))
	_, err := io.WriteString(w, b.String())
	return err
}
