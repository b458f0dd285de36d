// Package stages reads a trace of any dataplane into the stages the guide's NodePort and ClusterIP chapters
// walk through, in order: how the destination is matched, how the Service is found, how the endpoint is chosen,
// the DNAT, the SNAT, the source the pod sees and the reply.
//
// It reads only the trace (its hops, paths, endpoints and replies), never a dataplane's raw rules, so that the
// same reading serves every engine, a snapshot and a pasted dump alike. A stage no hop did says so ("none: …"),
// and a stage the trace cannot tell says "not known from this trace": it never guesses.
package stages

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/engines"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// The stages' keys, in the order Of returns them. They are stable: tools may rely on them.
const (
	Match   = "match"   // how the NodePort, ClusterIP or external IP is matched
	Service = "service" // how the Service is found
	Choice  = "choice"  // how the endpoint is chosen
	DNAT    = "dnat"    // the destination rewritten to the endpoint
	SNAT    = "snat"    // the source rewritten (masquerade), or not, and who asked for it
	Source  = "source"  // the source address the pod sees
	Reply   = "reply"   // how the answer comes back
)

// Titles are the stages' titles by key.
var Titles = map[string]string{
	Match:   "Destination matched",
	Service: "Service found",
	Choice:  "Endpoint chosen",
	DNAT:    "DNAT",
	SNAT:    "SNAT",
	Source:  "Source pod sees",
	Reply:   "Reply",
}

// Keys are the stages' keys in order.
var Keys = []string{Match, Service, Choice, DNAT, SNAT, Source, Reply}

// Texts for a stage the trace shows did not happen, or cannot tell.
const (
	None    = "none"
	Unknown = "not known from this trace"
)

// Stage is one stage of a trace.
type Stage struct {
	Key   string `json:"key"`
	Title string `json:"title"`
	// Text is what the dataplane does at this stage, in its own names (chains, maps, functions, rule text):
	// all of it when every path does the same, else what the paths share ("" when nothing).
	Text string `json:"text"`
	// Paths says what differs between paths (a local pod masqueraded to the bridge address, a remote one to
	// the node's): one entry per distinct text, with the paths it holds for. Empty when every path agrees.
	Paths []Variant `json:"paths,omitempty"`
	// Guide says the stage in the guide's terms: a sentence.
	Guide string `json:"guide"`
	// Hops are the hops the stage was read from.
	Hops []HopRef `json:"hops,omitempty"`
}

// Variant is what some of a trace's paths do at a stage.
type Variant struct {
	// Paths are the trace's paths (1-based, as the trace table numbers them) that do this.
	Paths []int `json:"paths"`
	// Label names those paths for a reader: their endpoints, and where their pods run when the trace knows it
	// ("10.244.2.2:80 (this node)", "10.244.1.2:80, 10.244.1.3:80 (other nodes)").
	Label string `json:"label"`
	Text  string `json:"text"`
}

// HopRef points at a hop of the trace.
type HopRef struct {
	// Path is 0 for the hops every path shares (Trace.Hops), else the 1-based path.
	Path int `json:"path"`
	// Index is the hop's index in Trace.Hops (Path 0) or in that path's Hops.
	Index int `json:"index"`
	// At says where the hop is: "nat/KUBE-NODEPORTS rule 2", "cilium_lb4_services_v2 (nodeport_lb4 → …)".
	At string `json:"at"`
}

// All returns all of a stage's text: Text, then each variant as "label: text".
func (s Stage) All() []string {
	var out []string
	if s.Text != "" {
		out = append(out, s.Text)
	}
	for _, v := range s.Paths {
		out = append(out, v.Label+": "+v.Text)
	}
	return out
}

// Find returns the stage with key, or a zero Stage.
func Find(stages []Stage, key string) Stage {
	for _, s := range stages {
		if s.Key == key {
			return s
		}
	}
	return Stage{}
}

// seg is a piece of a path's text at a stage, with the hops (indexes in the path's Hops) it came from.
type seg struct {
	text string
	hops []int
}

// reader reads one trace.
type reader struct {
	t *trace.Trace
	// ex is the trace's engine's explanation face (nil for a dataplane k8sguide has none for): how it
	// chooses endpoints, its sentences.
	ex dataplanes.Explainer
}

// Of reads a trace into its stages, in the order of Keys.
func Of(t *trace.Trace) []Stage {
	r := &reader{t: t, ex: explainer(t.Dataplane)}
	out := make([]Stage, 0, len(Keys))
	for _, key := range Keys {
		var shared seg
		per := make([][]seg, len(t.Paths))
		for i, p := range t.Paths {
			per[i] = r.segs(key, p)
			if len(per[i]) == 0 {
				per[i] = []seg{{text: r.fallback(key, p)}}
			}
		}
		if key == Choice && r.ex != nil {
			shared = seg{text: r.ex.ChoiceRule(t)}
		}
		out = append(out, r.stage(key, shared, per))
	}
	for i := range out {
		out[i].Guide = guide(r, out[i])
	}
	return out
}

// explainer is a dataplane's explanation face, when its engine has one.
func explainer(name string) dataplanes.Explainer {
	e, ok := engines.Get(dataplanes.Name(name))
	if !ok {
		return nil
	}
	x, _ := e.(dataplanes.Explainer)
	return x
}

// stage merges the paths' segments: what they all share (their common leading segments) is the Text, the rest
// is grouped into variants.
func (r *reader) stage(key string, shared seg, per [][]seg) Stage {
	s := Stage{Key: key, Title: Titles[key]}
	var texts []string
	addHops := func(path int, hops []int) {
		for _, i := range hops {
			ref := r.ref(path, i)
			if !slices.Contains(s.Hops, ref) {
				s.Hops = append(s.Hops, ref)
			}
		}
	}
	if shared.text != "" {
		texts = append(texts, shared.text)
		addHops(1, shared.hops)
	}
	// The common leading segments.
	n := 0
	if len(per) > 0 {
		n = len(per[0])
		for _, ss := range per[1:] {
			m := 0
			for m < n && m < len(ss) && ss[m].text == per[0][m].text {
				m++
			}
			n = m
		}
		for _, sg := range per[0][:n] {
			texts = append(texts, sg.text)
		}
	}
	for p, ss := range per {
		for _, sg := range ss {
			addHops(p+1, sg.hops)
		}
	}
	type group struct {
		text  string
		paths []int
	}
	var groups []*group
	for p, ss := range per {
		var rest []string
		for _, sg := range ss[n:] {
			rest = append(rest, sg.text)
		}
		text := joinSegs(rest)
		i := slices.IndexFunc(groups, func(g *group) bool { return g.text == text })
		if i < 0 {
			groups = append(groups, &group{text: text})
			i = len(groups) - 1
		}
		groups[i].paths = append(groups[i].paths, p+1)
	}
	switch {
	case len(groups) == 1 && groups[0].text != "":
		texts = append(texts, groups[0].text)
	case len(groups) > 1:
		for _, g := range groups {
			text := g.text
			if text == "" {
				text = None
			}
			s.Paths = append(s.Paths, Variant{Paths: g.paths, Label: r.label(g.paths), Text: text})
		}
	}
	s.Text = joinSegs(texts)
	if s.Text == "" && len(s.Paths) == 0 {
		s.Text = Unknown
	}
	return s
}

// joinSegs joins a stage's segments with "; ", except that a segment ending in ":" runs into the next (the
// place, then what it did there).
func joinSegs(texts []string) string {
	var b strings.Builder
	for i, t := range texts {
		if i > 0 {
			if strings.HasSuffix(texts[i-1], ":") {
				b.WriteString(" ")
			} else {
				b.WriteString("; ")
			}
		}
		b.WriteString(t)
	}
	return b.String()
}

// ref points at hop i of path (1-based); hops every path shares point at Trace.Hops.
func (r *reader) ref(path, i int) HopRef {
	h := r.t.Paths[path-1].Hops[i]
	if i < len(r.t.Hops) {
		path = 0
	}
	return HopRef{Path: path, Index: i, At: at(h)}
}

// label names a group of paths for a reader: by where their pods run when the trace knows it (the SNAT of a
// NodePort differs between a pod on this node and one elsewhere), else by their endpoints.
func (r *reader) label(paths []int) string {
	var eps []string
	local, remote, unknown := 0, 0, 0
	for _, p := range paths {
		path := r.t.Paths[p-1]
		if path.Endpoint == nil {
			unknown++
			eps = append(eps, "path "+strconv.Itoa(p))
			continue
		}
		eps = append(eps, path.Endpoint.Addr())
		switch {
		case path.Endpoint.Node == "" || r.t.Node == "":
			unknown++
		case path.Endpoint.Node == r.t.Node:
			local++
		default:
			remote++
		}
	}
	list := strings.Join(eps, ", ")
	switch {
	case unknown > 0:
		return list
	case remote == 0 && local == 1:
		return list + " (this node)"
	case remote == 0:
		return list + " (this node's pods)"
	case local == 0 && remote == 1:
		return list + " (other node)"
	case local == 0:
		return list + " (other nodes)"
	}
	return list
}

// fallback is a stage's text on a path where no hop did it: none when the path shows it cannot have happened
// (dropped before, an established flow), else not known.
func (r *reader) fallback(key string, p trace.Path) string {
	switch {
	case r.t.Conntrack != nil && key != Source && key != Reply:
		return None + ": an existing conntrack entry decides this flow (" + r.t.Conntrack.Direction + " direction)"
	case p.NoAnswer != "" && (key == Source || key == Reply):
		return None + ": no pod receives it, nothing answers (" + p.NoAnswer + ")"
	case p.NoAnswer != "":
		return None + ": no rule translated the packet; it leaves the node untranslated"
	case p.Verdict == trace.Local:
		return None + ": the packet is for the node itself; its own socket answers"
	case p.Verdict == trace.Unknown && len(p.Missing) > 0:
		return Unknown + ": the input lacks " + strings.Join(p.Missing, "; ")
	case p.Verdict == trace.Dropped || p.Verdict == trace.Rejected:
		if by := p.VerdictBy; by != nil && by.Table == "" && by.Function != "" {
			// An eBPF program's own drop: the program and its reason, not the map it read last.
			return fmt.Sprintf("%s: %s by %s: %s", None, p.Verdict, by.Chain, by.Text)
		}
		if p.VerdictBy != nil {
			return fmt.Sprintf("%s: %s by %s", None, p.Verdict, at(*p.VerdictBy))
		}
		return None + ": " + p.Verdict
	}
	return Unknown
}

// segs reads what path p does at a stage.
func (r *reader) segs(key string, p trace.Path) []seg {
	switch key {
	case Match:
		return r.match(p)
	case Service:
		return r.service(p)
	case Choice:
		return r.choice(p)
	case DNAT:
		return r.dnat(p)
	case SNAT:
		return r.snat(p)
	case Source:
		return r.source(p)
	case Reply:
		return r.reply(p)
	}
	return nil
}

// at says where a hop is, in the dataplane's names.
func at(h trace.Hop) string {
	switch {
	case h.Function != "":
		return h.Ref()
	case h.Table == "ipvs":
		return "IPVS " + strings.TrimSpace(h.Chain)
	case h.Rule == 0:
		return h.Chain + " policy"
	case strings.Contains(h.Table, " "):
		return h.Chain + " rule " + strconv.Itoa(h.Rule)
	}
	return h.Table + "/" + h.Chain + " rule " + strconv.Itoa(h.Rule)
}

// dnatIndex is the index of the first hop of p that does the DNAT (or len(hops)): the stages before it are read
// from the hops ahead of it.
func dnatIndex(p trace.Path) int {
	for i, h := range p.Hops {
		if _, ok := h.Part(trace.StageDNAT); ok && h.Matched {
			return i
		}
	}
	return len(p.Hops)
}

// partSeg is a part as a stage's segment.
func partSeg(part trace.Part, i int) seg { return seg{part.Says, []int{i}} }

// match: how the destination is matched: the dispatching hops ahead of the DNAT, up to the one that reaches the
// Service.
func (r *reader) match(p trace.Path) []seg {
	var out []seg
	for i, h := range p.Hops[:dnatIndex(p)] {
		if !h.Matched {
			continue
		}
		if part, ok := h.Part(trace.StageMatch); ok {
			out = append(out, partSeg(part, i))
		}
		if _, ok := h.Part(trace.StageService); ok && len(out) > 0 {
			return out
		}
	}
	return out
}

// service: how the Service is found: the last hop ahead of the DNAT that reaches it (of a lookup in two scopes,
// the one that decides).
func (r *reader) service(p trace.Path) []seg {
	var out []seg
	for i, h := range p.Hops[:dnatIndex(p)] {
		if part, ok := h.Part(trace.StageService); ok && h.Matched {
			out = []seg{{r.named(part.Says), []int{i}}}
		}
	}
	return out
}

// named puts the Service's name ahead of a text, when the trace knows it.
func (r *reader) named(text string) string {
	if r.t.Service == "" {
		return text
	}
	return r.t.Service + ": " + text
}

// choice: which endpoint this path takes, and with what chance or turn; none for a choice session affinity or
// an existing entry made.
func (r *reader) choice(p trace.Path) []seg {
	for i, h := range p.Hops {
		part, ok := h.Part(trace.StageChoice)
		if !ok || !h.Matched {
			continue
		}
		text := part.Says
		if part.Means != trace.MeansAffinity && part.Means != trace.MeansEstablished && p.Endpoint != nil && p.Endpoint.Probability > 0 {
			text += " (" + r.t.Chance(p.Endpoint.Probability) + ")"
		}
		return []seg{{text, []int{i}}}
	}
	return nil
}

// dnat: the rewrite of the destination to the endpoint: the place, then what it did there (where every path does
// it in the same place, the place is said once).
func (r *reader) dnat(p trace.Path) []seg {
	i := dnatIndex(p)
	if i == len(p.Hops) {
		return nil
	}
	part, _ := p.Hops[i].Part(trace.StageDNAT)
	if part.At == "" {
		return []seg{partSeg(part, i)}
	}
	return []seg{{part.At + ":", []int{i}}, partSeg(part, i)}
}

// snat: who asks for the masquerade (the mark) and who does it, or why nothing does.
func (r *reader) snat(p trace.Path) []seg {
	var out []seg
	for i, h := range p.Hops {
		if part, ok := h.Part(trace.StageMark); ok && h.Matched {
			out = append(out, partSeg(part, i))
			break
		}
	}
	none, noneAt := "", -1
	for i, h := range p.Hops {
		part, ok := h.Part(trace.StageSNAT)
		switch {
		case !ok:
		case part.Means != trace.MeansNone:
			return append(out, partSeg(part, i))
		default:
			// The last word on it before the packet leaves: a later hop knows more (a socket's connection
			// delivered to a pod of this node).
			none, noneAt = part.Says, i
		}
	}
	if p.Verdict != trace.Delivered {
		return nil // the fallback says why
	}
	if noneAt >= 0 {
		return append(out, seg{None + ": " + none, []int{noneAt}})
	}
	if slices.ContainsFunc(p.Hops, func(h trace.Hop) bool { return h.Hook == "POSTROUTING" }) {
		return append(out, seg{text: None + ": no POSTROUTING rule masquerades"})
	}
	return out
}

// source: the source address the pod sees.
func (r *reader) source(p trace.Path) []seg {
	if p.Verdict != trace.Delivered || p.SNAT == "" || p.NoAnswer != "" {
		return nil // the fallback says why no pod sees it
	}
	src, _, err := trace.ParseSrc(r.t.Packet.Src)
	if err == nil && strings.SplitN(p.SNAT, ":", 2)[0] == src.String() {
		return []seg{{text: p.SNAT + " (the sender's own)"}}
	}
	return []seg{{text: p.SNAT}}
}

// reply: how the answer comes back: who undoes the translations, into what.
func (r *reader) reply(p trace.Path) []seg {
	rp := p.Reply
	if rp == nil {
		return nil
	}
	text := fmt.Sprintf("the pod answers %s", rp.To)
	switch {
	case rp.From == rp.AsSeenFrom && rp.To == rp.AsSeenTo:
		text += " from " + rp.From + "; nothing to undo"
	case len(rp.UndoneBy) > 0:
		text += "; " + strings.Join(rp.UndoneBy, ", then ") + " turns it into " + rp.AsSeenFrom + " → " + rp.AsSeenTo
	default:
		text += "; it comes back as " + rp.AsSeenFrom + " → " + rp.AsSeenTo
	}
	if rp.Bypasses {
		text += "; but it bypasses this node: the client drops it, the connection fails"
	}
	return []seg{{text: text}}
}
