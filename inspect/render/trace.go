package render

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// TraceOptions choose how much of a trace the table shows.
type TraceOptions struct {
	// Wide shows every rule evaluated, with the reason each one did not match, and full rule text.
	// Otherwise rules that did not match are summarised per chain.
	Wide bool
}

// Trace prints a trace the way the guide's walkthroughs read: PREROUTING → KUBE-SERVICES → … → DNAT, then
// one section per possible endpoint, the endpoints with their chances, the reply and the notes.
func Trace(w io.Writer, t *trace.Trace, o TraceOptions) error {
	fmt.Fprintf(w, "Packet:    %s %s -> %s (from %s", t.Packet.Proto, t.Packet.Src, t.Packet.Dst, t.Packet.From)
	if t.Packet.InIface != "" {
		fmt.Fprintf(w, ", in on %s", t.Packet.InIface)
	}
	fmt.Fprintln(w, ")")
	node := t.Node
	if node == "" {
		node = "(from the input)"
	}
	fmt.Fprintf(w, "Node:      %s, dataplane %s\n", node, orDash(t.Dataplane))
	if t.Service != "" {
		fmt.Fprintf(w, "Service:   %s\n", t.Service)
	}
	fmt.Fprintf(w, "Verdict:   %s\n", verdictLine(t))
	if t.Conntrack != nil {
		fmt.Fprintf(w, "Conntrack: an existing entry decides this flow (%s direction):\n           %s\n", t.Conntrack.Direction, strings.TrimSpace(t.Conntrack.Entry))
	}
	fmt.Fprintln(w)

	if len(t.Paths) > 1 {
		fmt.Fprintf(w, "Every packet of a new flow takes these rules:\n\n")
	}
	if err := hopTable(w, t.Hops, o); err != nil {
		return err
	}
	if len(t.Paths) > 1 {
		for i, p := range t.Paths {
			fmt.Fprintf(w, "\nPath %d of %d, chance %s: %s\n\n", i+1, len(t.Paths), percent(p.Probability), pathTitle(p))
			if err := hopTable(w, p.Hops[len(t.Hops):], o); err != nil {
				return err
			}
		}
	}
	if len(t.Endpoints) > 0 {
		fmt.Fprintln(w)
		rows := [][]string{}
		turns := false
		for _, e := range t.Endpoints {
			turns = turns || e.Turn > 0
		}
		for _, e := range t.Endpoints {
			row := []string{e.Addr(), orDash(e.Pod), orDash(e.Node), fmt.Sprintf("%.11f", e.Probability), percent(e.Probability)}
			if turns {
				row = append(row, orDash(turnString(e.Turn)))
			}
			rows = append(rows, append(row, snatFor(t, e)))
		}
		header := []string{"ENDPOINT", "POD", "NODE", "PROBABILITY", ""}
		if turns {
			// Round robin is not random: the share is exact over a round, and the turn says who is next.
			header = append(header, "TURN")
		}
		if err := WriteTable(w, append(header, "SOURCE THE POD SEES"), rows); err != nil {
			return err
		}
	}
	if r := firstReply(t); r != nil {
		fmt.Fprintf(w, "\nReply: %s.\n", r.Text)
	}
	if len(t.Notes) > 0 {
		fmt.Fprintln(w, "\nNotes:")
		for _, n := range t.Notes {
			fmt.Fprintf(w, "  - %s\n", n)
		}
	}
	return nil
}

func verdictLine(t *trace.Trace) string {
	switch t.Verdict {
	case trace.Delivered:
		if len(t.Endpoints) == 0 {
			return "delivered (forwarded without translation)"
		}
		line := fmt.Sprintf("delivered to one of %d endpoint(s)", len(t.Endpoints))
		if r := firstReply(t); r != nil && r.Bypasses {
			line += ", but the reply bypasses this node: the connection fails (see Reply)"
		}
		return line
	case trace.Local:
		return "local: no rule translated it; the node's own socket (if any) answers"
	case trace.Rejected, trace.Dropped:
		for _, p := range t.Paths {
			if p.VerdictBy != nil {
				return fmt.Sprintf("%s by %s/%s rule %d: %s", t.Verdict, p.VerdictBy.Table, p.VerdictBy.Chain, p.VerdictBy.Rule, p.VerdictBy.Text)
			}
		}
	}
	return t.Verdict
}

func pathTitle(p trace.Path) string {
	switch {
	case p.Endpoint != nil:
		s := "endpoint " + p.Endpoint.Addr()
		if p.Endpoint.Pod != "" {
			s += " (pod " + p.Endpoint.Pod
			if p.Endpoint.Node != "" {
				s += " on " + p.Endpoint.Node
			}
			s += ")"
		}
		return s
	case p.VerdictBy != nil:
		return fmt.Sprintf("%s by %s/%s rule %d", p.Verdict, p.VerdictBy.Table, p.VerdictBy.Chain, p.VerdictBy.Rule)
	}
	return p.Verdict
}

func snatFor(t *trace.Trace, e trace.Endpoint) string {
	seen := map[string]bool{}
	var out []string
	for _, p := range t.Paths {
		if p.Endpoint != nil && p.Endpoint.Addr() == e.Addr() && !seen[p.SNAT] {
			seen[p.SNAT] = true
			out = append(out, p.SNAT)
		}
	}
	return strings.Join(out, ",")
}

func firstReply(t *trace.Trace) *trace.Reply {
	for _, p := range t.Paths {
		if p.Reply != nil {
			return p.Reply
		}
	}
	return nil
}

func turnString(turn int) string {
	switch turn {
	case 0:
		return ""
	case 1:
		return "next"
	}
	return strconv.Itoa(turn)
}

func percent(p float64) string { return strconv.FormatFloat(p*100, 'f', 2, 64) + "%" }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// hopTable prints hops; without Wide, runs of rules that did not match are folded into one line per chain.
// Map lookups (ebpf) have no rule position: their third column names the program's function instead.
func hopTable(w io.Writer, hops []trace.Hop, o TraceOptions) error {
	functions := slices.ContainsFunc(hops, func(h trace.Hop) bool { return h.Function != "" })
	var rows [][]string
	lastHook := ""
	hookCell := func(h trace.Hop) string {
		if h.Hook == lastHook {
			return ""
		}
		lastHook = h.Hook
		return h.Hook
	}
	for i := 0; i < len(hops); i++ {
		h := hops[i]
		if !h.Matched && !o.Wide && h.Probability == 0 {
			// Fold this run of misses in one chain.
			j := i
			for j < len(hops) && !hops[j].Matched && hops[j].Chain == h.Chain && hops[j].Table == h.Table && hops[j].Probability == 0 {
				j++
			}
			if j-i > 1 {
				// Rules have positions; map lookups (ebpf) do not.
				span, what := fmt.Sprintf("%d-%d", h.Rule, hops[j-1].Rule), "rules"
				if h.Rule == 0 {
					span, what = "", "lookups"
				}
				rows = append(rows, []string{hookCell(h), h.Table + "/" + h.Chain, span,
					fmt.Sprintf("(%d %s)", j-i, what), "no match (-o wide shows why)"})
				i = j - 1
				continue
			}
		}
		text := h.Text
		if !o.Wide && len(text) > 110 {
			text = text[:107] + "..."
		}
		rule := strconv.Itoa(h.Rule)
		if h.Rule == 0 {
			rule = ""
		}
		if functions {
			rule = h.Function
		}
		rows = append(rows, []string{hookCell(h), h.Table + "/" + h.Chain, rule, text, result(h)})
	}
	if len(rows) == 0 {
		return nil
	}
	third := "#"
	if functions {
		third = "FUNCTION"
	}
	return WriteTable(w, []string{"HOOK", "TABLE/CHAIN", third, "RULE", "RESULT"}, rows)
}

func result(h trace.Hop) string {
	if !h.Matched {
		if h.Probability > 0 {
			return "random: not this one"
		}
		return "no: " + h.Reason
	}
	r := h.Verdict
	switch {
	case h.Table == "ipvs" && h.Reason != "":
		// A scheduler's choice is not a random rule: say what it is.
		r = strings.TrimPrefix(r+": "+h.Reason, ": ")
	case h.Probability > 0:
		r = fmt.Sprintf("random (%.11f): %s", h.Probability, r)
	}
	if len(h.Changes) > 0 {
		r += " [" + strings.Join(h.Changes, "; ") + "]"
	}
	return r
}

// Verification prints the prediction next to the kernel's trace, hop by hop, and the verdict.
func Verification(w io.Writer, v *trace.Verification, o TraceOptions) error {
	t := v.Prediction
	fmt.Fprintf(w, "Packet:    %s %s -> %s (from %s)\n", t.Packet.Proto, t.Packet.Src, t.Packet.Dst, t.Packet.From)
	fmt.Fprintf(w, "Node:      %s, dataplane %s\n", orDash(t.Node), orDash(t.Dataplane))
	if v.Path >= 0 && v.Path < len(t.Paths) {
		p := t.Paths[v.Path]
		fmt.Fprintf(w, "Predicted: path %d of %d (chance %s): %s\n", v.Path+1, len(t.Paths), percent(p.Probability), pathTitle(p))
	}
	c := v.Connection
	if c.Answered {
		fmt.Fprintf(w, "Real connection: answered by pod %s, which saw source %s\n\n", c.Pod, c.Client)
	} else {
		fmt.Fprintf(w, "Real connection: %s\n\n", c.Error)
	}
	rows := [][]string{}
	for i, r := range v.Rows {
		mark := "ok"
		if !r.Agree {
			mark = "DIFFERENT"
		}
		rows = append(rows, []string{strconv.Itoa(i + 1), orDash(r.Predicted), orDash(r.Kernel), mark})
	}
	if err := WriteTable(w, []string{"#", "PREDICTED (rules that match)", "KERNEL TRACE", ""}, rows); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nVerdict: %s\n", v.Result)
	for _, r := range v.Reasons {
		fmt.Fprintf(w, "  - %s\n", r)
	}
	return nil
}
