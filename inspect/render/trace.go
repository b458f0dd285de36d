package render

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/stages"
)

// TraceOptions choose how much of a trace the table shows.
type TraceOptions struct {
	// Wide shows every rule evaluated, with the reason each one did not match, and full rule text, however
	// wide that is. Otherwise rules that did not match are summarised per chain and every line fits Width.
	Wide bool
	// Width is the number of columns the default view fits (0: DefaultWidth).
	Width int
	// Summary prints only the verdict, each endpoint with its chance and the source it sees, and the reply.
	Summary bool
}

func (o TraceOptions) width() int {
	if o.Width <= 0 {
		return DefaultWidth
	}
	return o.Width
}

// line prints a "Label:    text" line: as it is with Wide, else wrapped to the width under its text.
func (o TraceOptions) line(w io.Writer, label, text string) {
	first := fmt.Sprintf("%-11s", label)
	if o.Wide {
		fmt.Fprintln(w, first+text)
		return
	}
	io.WriteString(w, Wrap(first, strings.Repeat(" ", len(first)), text, o.width()))
}

// bullet prints a "  - text" line: as it is with Wide, else wrapped to the width under its text.
func (o TraceOptions) bullet(w io.Writer, text string) {
	if o.Wide {
		fmt.Fprintf(w, "  - %s\n", text)
		return
	}
	io.WriteString(w, Wrap("  -", "    ", text, o.width()))
}

// Trace prints a trace the way the guide's walkthroughs read: PREROUTING → KUBE-SERVICES → … → DNAT, then
// one section per possible endpoint, the endpoints with their chances, the reply and the notes.
func Trace(w io.Writer, t *trace.Trace, o TraceOptions) error {
	t = visible(t) // text from the input shows its control characters, never acts on the terminal
	if o.Summary {
		return traceSummary(w, t, o)
	}
	packet := fmt.Sprintf("%s %s -> %s (from %s", t.Packet.Proto, t.Packet.Src, t.Packet.Dst, t.Packet.From)
	if t.Packet.InIface != "" {
		packet += ", in on " + t.Packet.InIface
	}
	o.line(w, "Packet:", packet+")")
	node := t.Node
	if node == "" {
		node = "(from the input)"
	}
	o.line(w, "Node:", fmt.Sprintf("%s, dataplane %s", node, orDash(t.Dataplane)))
	if t.Service != "" {
		o.line(w, "Service:", t.Service)
	}
	o.line(w, "Verdict:", verdictLine(t))
	if t.Conntrack != nil {
		o.line(w, "Conntrack:", fmt.Sprintf("an existing entry decides this flow (%s direction): %s", t.Conntrack.Direction, strings.TrimSpace(t.Conntrack.Entry)))
	}
	fmt.Fprintln(w)

	hops := hopTable
	if !o.Wide {
		hops = compactHopTable
	}
	if len(t.Paths) > 1 {
		fmt.Fprintf(w, "Every packet of a new flow takes these rules:\n\n")
	}
	if err := hops(w, t.Hops, nil, o); err != nil {
		return err
	}
	if len(t.Paths) > 1 {
		for i, p := range t.Paths {
			title := fmt.Sprintf("Path %d of %d, chance %s: %s", i+1, len(t.Paths), percent(p.Probability), pathTitle(p))
			if o.Wide {
				fmt.Fprintf(w, "\n%s\n\n", title)
			} else {
				fmt.Fprintf(w, "\n%s", Wrap("", "  ", title, o.width()))
			}
			var first []trace.Hop
			if i > 0 {
				first = t.Paths[0].Hops[len(t.Hops):]
			}
			if err := hops(w, p.Hops[len(t.Hops):], first, o); err != nil {
				return err
			}
		}
	}
	if len(t.Endpoints) > 0 {
		fmt.Fprintln(w)
		if err := endpointTable(w, t, o); err != nil {
			return err
		}
	}
	replies(w, t, o)
	missing(w, t, o)
	if len(t.Notes) > 0 {
		fmt.Fprintln(w, "\nNotes:")
		for _, n := range t.Notes {
			o.bullet(w, n)
		}
	}
	// Where today's rules differ from the guide's (explain.go).
	if n := stages.GuideNote(t); n != "" {
		fmt.Fprintln(w)
		o.line(w, "Guide:", n)
	}
	return nil
}

// missing lists what the input lacks for the answer (the paths whose verdict is unknown).
func missing(w io.Writer, t *trace.Trace, o TraceOptions) {
	if len(t.Missing) == 0 {
		return
	}
	fmt.Fprintln(w, "\nMissing (the trace cannot tell what happens without it):")
	for _, m := range t.Missing {
		o.bullet(w, m)
	}
}

func endpointTable(w io.Writer, t *trace.Trace, o TraceOptions) error {
	rows := [][]string{}
	turns := false
	for _, e := range t.Endpoints {
		turns = turns || e.Turn > 0
	}
	for _, e := range t.Endpoints {
		row := []string{e.Addr(), orDash(e.Pod), orDash(e.Node)}
		if o.Wide {
			row = append(row, fmt.Sprintf("%.11f", e.Probability))
		}
		row = append(row, t.Chance(e.Probability))
		if turns {
			row = append(row, orDash(turnString(e.Turn)))
		}
		rows = append(rows, append(row, snatFor(t, e)))
	}
	header := []string{"ENDPOINT", "POD", "NODE"}
	if o.Wide {
		header = append(header, "PROBABILITY", "")
	} else {
		header = append(header, "CHANCE")
	}
	if turns {
		// Round robin is not random: the share is exact over a round, and the turn says who is next.
		header = append(header, "TURN")
	}
	header = append(header, "SOURCE THE POD SEES")
	if o.Wide {
		return WriteTable(w, header, rows)
	}
	cols := []Column{{}, {Min: 16}, {Min: 12}}
	return FitTable(w, o.width(), header, rows, cols)
}

// replies prints the way back of each path; paths whose replies read the same share one line.
func replies(w io.Writer, t *trace.Trace, o TraceOptions) {
	type group struct {
		text  string
		paths []int
	}
	var groups []*group
	byText := map[string]*group{}
	for i, p := range t.Paths {
		if p.Reply == nil {
			continue
		}
		text := p.Reply.Text
		if !o.Wide && p.Endpoint != nil {
			text = compactReply(p.Reply)
		}
		g := byText[text]
		if g == nil {
			g = &group{text: text}
			byText[text] = g
			groups = append(groups, g)
		}
		g.paths = append(g.paths, i+1)
	}
	if len(groups) == 0 {
		return
	}
	fmt.Fprintln(w)
	replying := 0
	for _, p := range t.Paths {
		if p.Reply != nil {
			replying++
		}
	}
	for _, g := range groups {
		label := "Reply:"
		if len(groups) > 1 || len(g.paths) < replying {
			label = "Reply, " + pathList(g.paths) + ":"
		}
		text := g.text
		if o.Wide {
			text += "."
		}
		if o.Wide {
			fmt.Fprintf(w, "%s %s\n", label, text)
		} else {
			io.WriteString(w, Wrap(label, "  ", text, o.width()))
		}
	}
}

func pathList(paths []int) string {
	s := make([]string, len(paths))
	for i, p := range paths {
		s[i] = strconv.Itoa(p)
	}
	if len(s) == 1 {
		return "path " + s[0]
	}
	return "paths " + strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// compactReply is a reply's addresses before and after what undoes the translations turns them back, and
// whether it bypasses the node; the whole sentence is in -o wide and the JSON.
func compactReply(r *trace.Reply) string {
	by := "conntrack"
	if len(r.UndoneBy) > 0 {
		by = strings.Join(r.UndoneBy, ", then ") // Cilium's maps, IPVS's connection entry: not always conntrack
	}
	s := fmt.Sprintf("the pod answers %s; %s turns the reply back into %s -> %s", r.To, by, r.AsSeenFrom, r.AsSeenTo)
	if r.From == r.AsSeenFrom && r.To == r.AsSeenTo {
		s = fmt.Sprintf("the pod answers %s from %s; nothing to undo", r.To, r.From)
	}
	if r.To == trace.Unknown {
		s = fmt.Sprintf("the pod answers the source it saw, which the input does not tell; back through this node, the reply becomes %s -> %s", r.AsSeenFrom, r.AsSeenTo)
	}
	if r.Bypasses {
		s += "; but it bypasses this node, so the client drops it and the connection fails (-o wide says why)"
	}
	return s
}

// traceSummary is the trace in a few lines: verdict, endpoints with chance and source, reply.
func traceSummary(w io.Writer, t *trace.Trace, o TraceOptions) error {
	head := fmt.Sprintf("%s %s -> %s", t.Packet.Proto, t.Packet.Src, t.Packet.Dst)
	if t.Service != "" {
		head += " (" + t.Service + ")"
	}
	head += fmt.Sprintf(" from %s, on %s (%s)", t.Packet.From, orDash(t.Node), orDash(t.Dataplane))
	io.WriteString(w, Wrap("", "  ", head, o.width()))
	io.WriteString(w, Wrap("Verdict:", "  ", verdictLine(t), o.width()))
	for _, m := range t.Missing {
		io.WriteString(w, Wrap("Missing:", "  ", m, o.width()))
	}
	// Three endpoints, or all when one more line would say as much as "and N more".
	const shown = 3
	var rows [][]string
	for i, e := range t.Endpoints {
		if i == shown && len(t.Endpoints) > shown+1 {
			rows = append(rows, []string{"", fmt.Sprintf("… and %d more (the table view lists them)", len(t.Endpoints)-shown)})
			break
		}
		rows = append(rows, []string{t.Chance(e.Probability), e.Addr(), orDash(e.Pod), orDash(e.Node), orDash(snatFor(t, e))})
	}
	if len(rows) > 0 {
		if err := FitTable(w, o.width(), []string{"CHANCE", "ENDPOINT", "POD", "NODE", "SOURCE IT SEES"}, rows,
			[]Column{{}, {}, {Min: 16}, {Min: 10}}); err != nil {
			return err
		}
	}
	seen := map[string]bool{}
	for _, p := range t.Paths {
		if r := p.Reply; r != nil && !seen[r.AsSeenFrom+" "+r.AsSeenTo] {
			seen[r.AsSeenFrom+" "+r.AsSeenTo] = true
			text := fmt.Sprintf("the pod answers the source it sees; conntrack turns that back into %s -> %s", r.AsSeenFrom, r.AsSeenTo)
			if r.Bypasses || r.To == trace.Unknown {
				text = compactReply(r)
			}
			if p.Endpoint == nil {
				text = r.Text // no pod: the path says who, if anyone, answers
			}
			io.WriteString(w, Wrap("Reply:", "  ", text, o.width()))
		}
	}
	return nil
}

// noAnswer says whether every delivered path leaves untranslated for an address nothing answers on.
func noAnswer(t *trace.Trace) bool {
	n := 0
	for _, p := range t.Paths {
		if p.Verdict != trace.Delivered {
			continue
		}
		if p.NoAnswer == "" {
			return false
		}
		n++
	}
	return n > 0
}

// nextNode is the node every delivered path leaves for, "" when they do not all leave for one.
func nextNode(t *trace.Trace) string {
	n := ""
	for _, p := range t.Paths {
		if p.Verdict != trace.Delivered {
			continue
		}
		if p.NextNode == "" || (n != "" && n != p.NextNode) {
			return ""
		}
		n = p.NextNode
	}
	return n
}

func verdictLine(t *trace.Trace) string {
	switch t.Verdict {
	case trace.Delivered:
		if len(t.Endpoints) == 0 {
			if n := nextNode(t); n != "" {
				return fmt.Sprintf("leaves for node %s untranslated: its rules take the packet on (see Notes)", n)
			}
			if noAnswer(t) {
				return "not answered: no rule translated it, and it leaves the node for an address no host owns (see Notes)"
			}
			return "leaves the node untranslated: no rule took it (see Notes)"
		}
		line := fmt.Sprintf("delivered to one of %d endpoints", len(t.Endpoints))
		if len(t.Endpoints) == 1 {
			line = "delivered to its only endpoint"
			if e := t.Endpoints[0]; e.Addr() == t.Packet.Dst && e.Pod != "" {
				line = "delivered untranslated to pod " + e.Pod + ", whose address it is"
			}
		}
		if by := t.EveryDelivered(func(p trace.Path) string { return p.LocalOnly }); by != "" {
			// A traffic policy of Local: the choice is among this node's endpoints, not all of the Service's.
			line = fmt.Sprintf("delivered to one of the %d endpoints on this node (traffic policy Local: %s)", len(t.Endpoints), by)
			if len(t.Endpoints) == 1 {
				line = fmt.Sprintf("delivered to the only endpoint on this node (traffic policy Local: %s)", by)
			}
		}
		if by := t.EveryDelivered(func(p trace.Path) string { return p.Affinity }); by != "" && len(t.Endpoints) == 1 {
			line = fmt.Sprintf("delivered to %s, the endpoint this client's session affinity holds (%s)", t.Endpoints[0].Addr(), by)
		}
		if r := firstReply(t); r != nil && r.Bypasses {
			line += ", but the reply bypasses this node: the connection fails (see Reply)"
		}
		return line
	case trace.Local:
		if part, ok := t.FirstPart(trace.StageDNAT, func(h trace.Hop, p trace.Part) bool { return p.Means == trace.MeansRedirect }); ok {
			return fmt.Sprintf("local: %s by %s; the node's own socket on that port (if any) answers", part.Says, part.At)
		}
		return "local: no rule translated it; the node's own socket (if any) answers"
	case trace.Unknown:
		// Never a guess: say what the answer needs and the input lacks (listed under "Missing:").
		known := 0.0
		for _, p := range t.Paths {
			if p.Verdict != trace.Unknown {
				known += p.Probability
			}
		}
		line := "unknown: the input lacks what the answer needs (see Missing)"
		if known > 0 {
			line = fmt.Sprintf("unknown for %s of new flows: the input lacks what the answer needs (see Missing); the other paths are known", percent(1-known))
		}
		if t.Unexplored > 0 {
			// Not what the input lacks: what the walk did not reach.
			line = fmt.Sprintf("unknown for %s of new flows: k8sguide stopped walking their random choices at its bounds (%s not explored; see Missing)", percent(1-known), percent(t.Unexplored))
			if known > 0 {
				line += "; the other paths are known, and each endpoint's chance is the least it gets"
			}
		}
		return line
	case trace.Rejected, trace.Dropped:
		for _, p := range t.Paths {
			if p.VerdictBy != nil {
				return fmt.Sprintf("%s by %s: %s", t.Verdict, decidedBy(p.VerdictBy), p.VerdictBy.Text)
			}
		}
	}
	return t.Verdict
}

// decidedBy names the hop that dropped or rejected a packet: its table, chain and rule number, or without a
// number where none decided (a chain's policy, an eBPF program's own code).
func decidedBy(h *trace.Hop) string {
	if h.Table == "" {
		return h.Chain // a program, not a table of rules
	}
	if h.Rule == 0 {
		return h.Table + "/" + h.Chain
	}
	return fmt.Sprintf("%s/%s rule %d", h.Table, h.Chain, h.Rule)
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
		return fmt.Sprintf("%s by %s", p.Verdict, decidedBy(p.VerdictBy))
	case p.Verdict == trace.Unknown && len(p.Missing) > 0:
		return "unknown: the input lacks " + p.Missing[0]
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

// percent is a chance as every view prints it (trace.Percent: a chance that is not zero never reads 0.00%).
func percent(p float64) string { return trace.Percent(p) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// hopTable prints hops; without Wide, runs of rules that did not match are folded into one line per chain.
// Map lookups (ebpf) have no rule position: their third column names the program's function instead.
func hopTable(w io.Writer, hops, _ []trace.Hop, o TraceOptions) error {
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
	case h.Probability > 0 && h.Choice == trace.ChoiceMaglev:
		r = fmt.Sprintf("Maglev table share (%.11f): %s", h.Probability, r)
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
	v = visible(v) // the input's text and the kernel's, as Trace shows them
	t := v.Prediction
	o.line(w, "Packet:", fmt.Sprintf("%s %s -> %s (from %s)", t.Packet.Proto, t.Packet.Src, t.Packet.Dst, t.Packet.From))
	o.line(w, "Node:", fmt.Sprintf("%s, dataplane %s", orDash(t.Node), orDash(t.Dataplane)))
	if v.Path >= 0 && v.Path < len(t.Paths) {
		p := t.Paths[v.Path]
		o.line(w, "Predicted:", fmt.Sprintf("path %d of %d (chance %s): %s", v.Path+1, len(t.Paths), percent(p.Probability), pathTitle(p)))
	}
	c := v.Connection
	if c.Answered {
		o.line(w, "Real connection:", fmt.Sprintf("answered by pod %s, which saw source %s", c.Pod, c.Client))
	} else {
		o.line(w, "Real connection:", c.Error)
	}
	fmt.Fprintln(w)
	rows := [][]string{}
	for i, r := range v.Rows {
		mark := "ok"
		if !r.Agree {
			mark = "DIFFERENT"
		}
		rows = append(rows, []string{strconv.Itoa(i + 1), orDash(r.Predicted), orDash(r.Kernel), mark})
	}
	header := []string{"#", "PREDICTED (rules that match)", "KERNEL TRACE", ""}
	var err error
	if o.Wide {
		err = WriteTable(w, header, rows)
	} else {
		err = FitTable(w, o.width(), header, rows, []Column{{}, {Min: 20, Shorten: shortenRule}, {Min: 20, Shorten: shortenRule}})
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(w)
	verdict := v.Result
	if v.Outcome != "" {
		verdict += ": " + v.Outcome
	}
	o.line(w, "Verdict:", verdict)
	for _, r := range v.Reasons {
		o.bullet(w, r)
	}
	return nil
}
