package render

import (
	"fmt"
	"html"
	"math"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/engines"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// The trace as a picture, in the guide's style: the packet's source on the left, the node and its hooks left
// to right, a box per hook the packet crosses listing the rules (or map lookups) that acted on it, a branch per
// path with its chance, DNAT and SNAT written on the arrows (FROM → TO), the endpoint on the right and the
// reply dashed back through the box where the node undoes the NAT. TraceDOT writes it in Graphviz's language;
// Graphviz (k8sguide-graphviz) lays it out.
// Every dataplane's trace reads the same way because the picture is made from the engine-independent model.
//
// The text is monospace (Courier): Graphviz sizes a box from its own estimate of the font's metrics, and every
// monospace font advances 0.6 em per character, so the estimate holds whatever font the viewer substitutes. A
// proportional font estimated as Helvetica overflows its boxes where the browser's sans-serif is DejaVu Sans.

// maxPicturePaths is how many paths get their own branch; the rest are one box that points to the table (a
// Service with 20 endpoints would otherwise be a picture nobody reads).
const maxPicturePaths = 8

// pictureTextWidth bounds a line of text in a box, in characters: full rule text is in the table.
const pictureTextWidth = 44

// pictureNameWidth bounds a chain's name, cut in the middle where it is longer: kube-proxy's names are whole
// (nat/KUBE-SVC-LOLE4ISW44XBNF3G, external-PFISGYVC-default/web/tcp/), as the table and the guide write them.
const pictureNameWidth = 40

// The guide's colours (draw.io's palette, which the guide's diagrams use): rules blue, translations orange,
// pods green, drops red, the packet's source grey.
const (
	fillRule, lineRule           = "#dae8fc", "#6c8ebf"
	fillNAT, lineNAT             = "#ffe6cc", "#d79b00"
	fillPod, linePod             = "#d5e8d4", "#82b366"
	fillDrop, lineDrop           = "#f8cecc", "#b85450"
	fillSource, lineSource       = "#f5f5f5", "#666666"
	clusterNode, clusterNodeFill = "#82b366", "#f7fbf4"
	clusterHook                  = "#9673a6"
)

// packetState is the packet's addresses as the walk changes them.
type packetState struct{ src, dst string }

// apply changes st by what h did, and returns the change as the arrow after h's box says it ("" for none).
func (st *packetState) apply(h trace.Hop) string {
	if !h.Matched {
		return ""
	}
	v := h.Verdict
	switch {
	case strings.HasPrefix(v, "dnat to "), strings.HasPrefix(v, "redirect to "):
		to := v[strings.Index(v, " to ")+4:]
		change := "DNAT " + st.dst + "\n→ " + to
		st.dst = to
		return change
	case strings.HasPrefix(v, "masquerade to "), strings.HasPrefix(v, "snat to "):
		to := v[strings.Index(v, " to ")+4:]
		name := "SNAT"
		if strings.HasPrefix(v, "masquerade") {
			name = "SNAT (masquerade)"
		}
		change := name + "\n" + st.src + " → " + to
		st.src = to
		return change
	}
	return ""
}

// shownInPicture says whether a hop gets a line in its box: the rules that acted. Misses, plain returns and a
// chain's accepting policy are in the table; a hop that ends the path (drop, reject) is always shown.
func shownInPicture(h trace.Hop) bool {
	if !h.Matched {
		return false
	}
	switch verb(h.Verdict) {
	case "return":
		return false
	case "continue":
		return len(h.Changes) > 0
	case "policy":
		return h.Verdict != "policy accept"
	}
	return true
}

// leadsSomewhere says whether hops[i], when a jump, led to a rule that matched in the chain it jumped to: a jump
// into a chain where nothing matched (KUBE-PROXY-FIREWALL for most packets) is left to the table.
func leadsSomewhere(hops []trace.Hop, i int) bool {
	v := verb(hops[i].Verdict)
	if v != "jump" && v != "goto" {
		return true
	}
	target := strings.TrimPrefix(hops[i].Verdict, v+" ")
	for _, h := range hops[i+1:] {
		if h.Matched && h.Rule > 0 {
			return h.Chain == target
		}
	}
	return true // the path ends in the table's hands: say where it went
}

// pictureLine is one hop as a line of its box (HTML-escaped).
func pictureLine(h trace.Hop) string {
	const br = `<BR ALIGN="LEFT"/>`
	const indent = "&nbsp;&nbsp;"
	if h.Function != "" {
		// A program's step: the functions doing it (a calls b: one a line), the map it reads, what it found.
		var lines []string
		for i, f := range strings.Split(h.Function, " → ") {
			if i > 0 {
				f = "→ " + f
			}
			lines = append(lines, html.EscapeString(ShortenEnd(f, pictureTextWidth)))
		}
		if h.Table != "" {
			lines = append(lines, indent+html.EscapeString(ShortenEnd("map "+h.Table, pictureTextWidth)))
		}
		lines = append(lines, indent+html.EscapeString(ShortenEnd(compactResult(h), pictureTextWidth)))
		return strings.Join(lines, br)
	}
	where := h.Chain
	switch {
	case h.Table == "ipvs":
		where = "IPVS " + strings.Join(strings.Fields(h.Chain), " ")
	case h.Table != "" && !strings.Contains(h.Table, " "):
		where = h.Table + "/" + h.Chain // iptables; nftables' one table is in the title
	}
	if h.Table == "ipvs" {
		where = ShortenMiddle(where, pictureTextWidth)
	} else {
		where = ShortenMiddle(where, pictureNameWidth)
	}
	if h.Rule > 0 {
		where += fmt.Sprintf(" #%d", h.Rule)
	}
	// Two lines, where and what, keep the boxes narrow: the picture grows left to right with every hook.
	r := h.Verdict
	switch verb(r) {
	case "jump", "goto":
		r = "→ " + ShortenMiddle(strings.TrimPrefix(r, verb(r)+" "), pictureNameWidth)
	default:
		r = compactResult(h)
	}
	return html.EscapeString(where) + br + indent + html.EscapeString(ShortenEnd(r, pictureTextWidth))
}

// pictureBuilder accumulates the DOT text.
type pictureBuilder struct {
	b     strings.Builder
	n     int
	hooks []string            // in order of first appearance
	progs map[string]string   // hook → the program attached there (ebpf: the hops' chain), "" for netfilter
	boxes map[string][]string // hook → the DOT statements of its boxes
	undo  []string            // the boxes where the node undoes the replies' NAT, in the node but in no hook
	undos map[string]string   // what undoes a reply and what the sender gets → its box's id
}

func (pb *pictureBuilder) id(prefix string) string {
	pb.n++
	return fmt.Sprintf("%s%d", prefix, pb.n)
}

// hookBox adds a box for hops (all of one hook) and returns its id.
func (pb *pictureBuilder) hookBox(hook string, hops []trace.Hop, nat bool) string {
	id := pb.id("h")
	fill, line := fillRule, lineRule
	if nat {
		fill, line = fillNAT, lineNAT
	}
	var rows strings.Builder
	for _, h := range hops {
		fmt.Fprintf(&rows, `<TR><TD ALIGN="LEFT" BALIGN="LEFT">%s</TD></TR>`, pictureLine(h))
	}
	stmt := fmt.Sprintf(`%s [label=<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="1">%s</TABLE>>, fillcolor=%q, color=%q];`,
		id, rows.String(), fill, line)
	if _, ok := pb.boxes[hook]; !ok {
		pb.hooks = append(pb.hooks, hook)
		if hops[0].Function != "" {
			pb.progs[hook] = hops[0].Chain
		}
	}
	pb.boxes[hook] = append(pb.boxes[hook], stmt)
	return id
}

// segment is a run of shown hops of one hook.
type segment struct {
	hook string
	hops []trace.Hop
}

func segments(hops []trace.Hop) []segment {
	var out []segment
	for start := 0; start < len(hops); {
		end := start
		for end < len(hops) && hops[end].Hook == hops[start].Hook {
			end++
		}
		s := segment{hook: hops[start].Hook}
		var last *trace.Hop
		for i := start; i < end; i++ {
			if hops[i].Matched {
				last = &hops[i]
			}
			if shownInPicture(hops[i]) && leadsSomewhere(hops, i) {
				s.hops = append(s.hops, hops[i])
			}
		}
		// A hook the packet crosses keeps its box even where no rule acted: the box says what let it through
		// (the chain's policy), so that the picture does not skip FORWARD for a packet that was forwarded.
		if len(s.hops) == 0 && last != nil {
			s.hops = append(s.hops, *last)
		}
		if len(s.hops) > 0 {
			out = append(out, s)
		}
		start = end
	}
	return out
}

// chain draws hops as boxes joined by arrows from `from`, the arrow after a box naming what the box changed;
// it returns the last box and the label the next arrow carries.
func (pb *pictureBuilder) chain(from, pending string, hops []trace.Hop, st *packetState, edges *[]string) (string, string) {
	for _, s := range segments(hops) {
		var changes []string
		for _, h := range s.hops {
			if c := st.apply(h); c != "" {
				changes = append(changes, c)
			}
		}
		id := pb.hookBox(s.hook, s.hops, len(changes) > 0)
		*edges = append(*edges, edge(from, id, pending, ""))
		from, pending = id, strings.Join(changes, "\n")
	}
	return from, pending
}

// edge is a DOT edge statement; label lines are separated by "\n".
func edge(from, to, label, attrs string) string {
	var a []string
	if label != "" {
		var lines []string
		for _, l := range strings.Split(label, "\n") {
			lines = append(lines, html.EscapeString(l))
		}
		a = append(a, "label=<"+strings.Join(lines, "<BR/>")+">")
	}
	if attrs != "" {
		a = append(a, attrs)
	}
	if len(a) == 0 {
		return fmt.Sprintf("%s -> %s;", from, to)
	}
	return fmt.Sprintf("%s -> %s [%s];", from, to, strings.Join(a, ", "))
}

// choiceLabel is the branch arrow's label: the path's chance and how it is chosen.
func choiceLabel(t *trace.Trace, p trace.Path) string {
	if len(t.Paths) == 1 {
		return ""
	}
	label := percent(p.Probability)
	for _, h := range p.Hops {
		if h.Matched && h.Probability > 0 && h.Choice == trace.ChoiceMaglev {
			label = "Maglev share " + label
			break
		}
	}
	if p.Endpoint != nil && p.Endpoint.Turn > 0 {
		label += fmt.Sprintf(", rr turn %d", p.Endpoint.Turn)
	}
	if c := cascade(p); c != "" {
		label += "\n" + c
	}
	return label
}

// cascade is how an iptables statistic cascade reaches the path's endpoint, as the guide explains it: each
// rule before it passed over (its chance not taken), then its own rule's chance, or what is left for the last
// rule ("1/3 (rule 2)", "2/3 × 1/2 (rule 3)", "2/3 × 1/2 left (rule 4)"); "" for any other choice.
func cascade(p trace.Path) string {
	var factors []string
	for _, h := range p.Hops {
		if h.Table != "nat" || h.Rule == 0 || h.Choice != "" {
			continue
		}
		switch {
		case !h.Matched && h.Probability > 0:
			factors = append(factors, fraction(1-h.Probability))
		case h.Matched && h.Probability > 0:
			return strings.Join(append(factors, fraction(h.Probability)), " × ") + fmt.Sprintf(" (rule %d)", h.Rule)
		case h.Matched && len(factors) > 0 && strings.HasPrefix(h.Verdict, "jump KUBE-SEP-"):
			return strings.Join(factors, " × ") + fmt.Sprintf(" left (rule %d)", h.Rule)
		}
	}
	return ""
}

// fraction writes a chance as n/d when a denominator up to 64 gives it (kube-proxy writes 1/n as 0.33333333349),
// else with three decimals.
func fraction(x float64) string {
	for d := 2; d <= 64; d++ {
		n := math.Round(x * float64(d))
		if n >= 1 && n < float64(d) && math.Abs(x-n/float64(d)) < 1e-6 {
			return fmt.Sprintf("%d/%d", int(n), d)
		}
	}
	return fmt.Sprintf("%.3f", x)
}

// endBox is where a path ends: the endpoint's pod, or what stopped the packet.
func (pb *pictureBuilder) endBox(p trace.Path, dst string) string {
	id := pb.id("e")
	var lines []string
	fill, line := fillPod, linePod
	switch {
	case p.Endpoint != nil:
		pod := p.Endpoint.Pod
		if _, name, ok := strings.Cut(pod, "/"); ok {
			pod = name
		}
		if pod != "" {
			lines = append(lines, "pod "+pod)
		} else {
			lines = append(lines, "endpoint (pod not known)")
		}
		lines = append(lines, p.Endpoint.Addr())
		if p.Endpoint.Node != "" {
			lines = append(lines, "on "+p.Endpoint.Node)
		}
	case p.Verdict == trace.Delivered:
		// Sent on with its destination untranslated: no rule made it a Service's packet.
		fill, line = fillSource, lineSource
		lines = append(lines, "sent on to "+dst, "(not translated)")
		if p.Egress != "" {
			lines = append(lines, ShortenEnd(p.Egress, pictureTextWidth))
		}
	case p.Verdict == trace.Local:
		lines = append(lines, "a socket on the node", "(nothing translated it)")
	case p.Verdict == trace.Unknown:
		// Grey, like an untranslated packet: the picture must not look surer than the table.
		fill, line = fillSource, lineSource
		lines = append(lines, "unknown: the input lacks")
		for _, m := range p.Missing {
			lines = append(lines, wrapLines("", "", m, pictureTextWidth)...)
		}
	default:
		fill, line = fillDrop, lineDrop
		lines = append(lines, p.Verdict)
		if p.VerdictBy != nil {
			by := "by " + ShortenMiddle(p.VerdictBy.Chain, pictureTextWidth)
			if p.VerdictBy.Rule != 0 {
				by += fmt.Sprintf(" #%d", p.VerdictBy.Rule)
			}
			lines = append(lines, by)
		}
	}
	for i := range lines {
		lines[i] = html.EscapeString(lines[i])
	}
	fmt.Fprintf(&pb.b, "  %s [label=<%s>, fillcolor=%q, color=%q];\n", id, strings.Join(lines, "<BR/>"), fill, line)
	return id
}

// reply draws a path's reply from its end box e back to the sender src, through the node where the node undoes
// the NAT (conntrack's entry, IPVS's connection, Cilium's reverse-NAT map): a box in the node says what undoes
// it and what it rewrites, shared by the replies it undoes alike. A reply that bypasses the node, or that
// nothing needs to undo, goes straight back. The dashed arrows run against the graph (dir=back), so that
// Graphviz ranks the box between the sender and the pods, as the reply travels, rather than tangling long arcs
// across the picture.
func (pb *pictureBuilder) reply(e, src string, r trace.Reply) []string {
	dashed := func(colour string) string {
		return fmt.Sprintf("style=dashed, color=%q, fontcolor=%q", colour, colour)
	}
	to := "reply → " + r.To
	if r.To == trace.Unknown {
		to = "reply → the source\nthe pod saw (unknown)"
	}
	seen := r.AsSeenFrom + "\n→ " + r.AsSeenTo
	switch {
	case r.Bypasses:
		return []string{edge(e, src, to+"\nbypasses this node:\ndropped by the sender", dashed(lineDrop)+", constraint=false")}
	case len(r.UndoneBy) == 0:
		return []string{edge(e, src, to, dashed(lineRule)+", constraint=false")}
	}
	key := strings.Join(r.UndoneBy, "\x00") + "\x00" + seen
	id, ok := pb.undos[key]
	var out []string
	if !ok {
		id = pb.id("r")
		pb.undos[key] = id
		lines := []string{"reply: undone by " + strings.Join(r.UndoneBy, ", ")}
		if len(lines[0]) > pictureTextWidth {
			lines = []string{"reply: undone by"}
			for _, by := range r.UndoneBy {
				lines = append(lines, "  "+ShortenMiddle(by, pictureTextWidth))
			}
		}
		if r.To != r.AsSeenTo {
			lines = append(lines, "dst back to "+r.AsSeenTo)
		}
		if r.From != r.AsSeenFrom {
			lines = append(lines, "src back to "+r.AsSeenFrom)
		}
		for i := range lines {
			lines[i] = html.EscapeString(lines[i])
		}
		pb.undo = append(pb.undo, fmt.Sprintf(`%s [label=<%s>, fillcolor=%q, color=%q, style="rounded,filled,dashed"];`,
			id, strings.Join(lines, `<BR ALIGN="LEFT"/>`)+`<BR ALIGN="LEFT"/>`, fillNAT, lineNAT))
		out = append(out, edge(src, id, seen, dashed(lineRule)+", dir=back, weight=0"))
	}
	return append(out, edge(id, e, to, dashed(lineRule)+", dir=back"))
}

// TraceDOT is t as a Graphviz digraph (see the comment at the top of this file).
func TraceDOT(t *trace.Trace) string {
	t = visible(t) // `-o dot` goes to a terminal as often as to Graphviz
	pb := &pictureBuilder{boxes: map[string][]string{}, progs: map[string]string{}, undos: map[string]string{}}
	title := fmt.Sprintf("%s %s → %s from %s", t.Packet.Proto, t.Packet.Src, t.Packet.Dst, t.Packet.From)
	if t.Service != "" {
		title += " · Service " + t.Service
	}
	var edges []string
	src := "src"
	srcLabel := t.Packet.From
	if strings.HasPrefix(srcLabel, "pod/") {
		srcLabel = "pod " + strings.TrimPrefix(srcLabel, "pod/")
	}
	srcLabel += "<BR/>" + html.EscapeString(t.Packet.Src)
	if t.Packet.InIface != "" {
		srcLabel += "<BR/>in on " + html.EscapeString(t.Packet.InIface)
	}

	st := packetState{src: t.Packet.Src, dst: t.Packet.Dst}
	first := fmt.Sprintf("%s %s\n→ %s", t.Packet.Proto, t.Packet.Src, t.Packet.Dst)
	last, pending := pb.chain(src, first, t.Hops, &st, &edges)
	common := len(t.Hops)

	shown := t.Paths
	if len(shown) > maxPicturePaths {
		shown = shown[:maxPicturePaths]
	}
	var replies []string
	for _, p := range shown {
		pst := st
		label := strings.TrimSpace(choiceLabel(t, p) + "\n" + pending)
		own := p.Hops
		if common <= len(own) {
			own = own[common:]
		}
		end, tail := pb.chain(last, label, own, &pst, &edges)
		e := pb.endBox(p, pst.dst)
		arrive := tail
		if p.Verdict == trace.Delivered {
			seen := pst.src
			if p.SNAT == trace.Unknown {
				seen = "unknown (see notes)"
			}
			arrive = strings.TrimSpace(tail + "\npod sees source " + seen)
		}
		if end == last && tail == label {
			arrive = label // no hop of its own: the branch goes straight to the end
		}
		edges = append(edges, edge(end, e, arrive, ""))
		if r := p.Reply; r != nil {
			replies = append(replies, pb.reply(e, src, *r)...)
		}
	}
	if more := len(t.Paths) - len(shown); more > 0 {
		id := pb.id("m")
		var chance float64
		for _, p := range t.Paths[len(shown):] {
			chance += p.Probability
		}
		fmt.Fprintf(&pb.b, "  %s [label=%q, fillcolor=%q, color=%q];\n", id,
			fmt.Sprintf("%d more paths (see the table)", more), fillSource, lineSource)
		edges = append(edges, edge(last, id, percent(chance), "style=dotted"))
	}

	// The trace's notes (what a pasted dump lacked and was assumed, live flows that decide instead) go under the
	// title: a picture must not look surer than the table.
	label := "<B>" + html.EscapeString(title) + "</B>"
	const maxNotes = 4
	for i, n := range t.Notes {
		if i == maxNotes {
			label += `<BR ALIGN="LEFT"/>` + html.EscapeString(fmt.Sprintf("(%d more notes in the table)", len(t.Notes)-maxNotes))
			break
		}
		for _, l := range wrapLines("note: ", "      ", n, 110) {
			label += `<BR ALIGN="LEFT"/>` + html.EscapeString(l)
		}
	}
	if len(t.Notes) > 0 {
		label += `<BR ALIGN="LEFT"/>`
	}

	var out strings.Builder
	out.WriteString("digraph trace {\n")
	fmt.Fprintf(&out, "  graph [rankdir=LR, fontname=\"Courier\", fontsize=13, nodesep=0.25, ranksep=0.3, newrank=true, labelloc=t, labeljust=l, label=<%s>];\n", label)
	out.WriteString("  node [fontname=\"Courier\", fontsize=11, shape=box, style=\"rounded,filled\", margin=\"0.1,0.06\"];\n")
	out.WriteString("  edge [fontname=\"Courier\", fontsize=10, color=\"#333333\"];\n")
	fmt.Fprintf(&out, "  %s [label=<%s>, fillcolor=%q, color=%q];\n", src, srcLabel, fillSource, lineSource)
	nodeTitle := "node " + t.Node + " · " + dataplaneTitle(t)
	if t.Node == "" {
		nodeTitle = "the node (its name is not in the input) · " + dataplaneTitle(t)
	}
	fmt.Fprintf(&out, "  subgraph cluster_node {\n    label=<%s>; style=rounded; color=%q; bgcolor=%q; fontsize=12;\n",
		html.EscapeString(nodeTitle), clusterNode, clusterNodeFill)
	for _, stmt := range pb.undo {
		out.WriteString("    " + stmt + "\n")
	}
	for i, hook := range pb.hooks {
		fmt.Fprintf(&out, "    subgraph cluster_hook%d {\n      label=<%s>; style=\"rounded,dashed\"; color=%q; bgcolor=\"#ffffff\"; fontsize=11;\n",
			i, html.EscapeString(strings.TrimSuffix(hook+" · "+pb.progs[hook], " · ")), clusterHook)
		for _, stmt := range pb.boxes[hook] {
			out.WriteString("      " + stmt + "\n")
		}
		out.WriteString("    }\n")
	}
	out.WriteString("  }\n")
	out.WriteString(pb.b.String())
	for _, e := range edges {
		out.WriteString("  " + e + "\n")
	}
	for _, e := range replies {
		out.WriteString("  " + e + "\n")
	}
	out.WriteString("}\n")
	return out.String()
}

// dataplaneTitle names the dataplane as the guide does (its engine's lab face), with kube-proxy's nftables table.
func dataplaneTitle(t *trace.Trace) string {
	face, ok := engines.Lab(dataplanes.Name(t.Dataplane))
	if !ok {
		return orDash(t.Dataplane)
	}
	if face.KubeProxyMode == "nftables" {
		for _, h := range t.Hops {
			if strings.Contains(h.Table, " ") {
				return face.Title + " (table " + h.Table + ")"
			}
		}
	}
	return face.Title
}
