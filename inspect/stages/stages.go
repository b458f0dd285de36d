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
	"regexp"
	"slices"
	"strconv"
	"strings"

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
	t      *trace.Trace
	family string // iptables, nftables, ipvs, ebpf (how the hops read)
}

// Of reads a trace into its stages, in the order of Keys.
func Of(t *trace.Trace) []Stage {
	r := &reader{t: t, family: family(t)}
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
		if key == Choice {
			shared = r.choiceSummary()
		}
		out = append(out, r.stage(key, shared, per))
	}
	for i := range out {
		out[i].Guide = guide(r, out[i])
	}
	return out
}

// family says how a trace's hops read: an ebpf program's map lookups, IPVS behind iptables, kube-proxy's
// nftables table, or iptables.
func family(t *trace.Trace) string {
	switch t.Dataplane {
	case "ebpf", "ipvs", "nftables", "iptables":
		return t.Dataplane
	}
	for _, p := range t.Paths {
		for _, h := range p.Hops {
			switch {
			case h.Function != "":
				return "ebpf"
			case h.Table == "ipvs":
				return "ipvs"
			case strings.Contains(h.Table, " "):
				return "nftables"
			}
		}
	}
	return "iptables"
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
	case p.Verdict == trace.Local:
		return None + ": no rule translated the packet; the node's own socket answers"
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

var (
	dportRE    = regexp.MustCompile(`--dport (\d+)`)
	daddrRE    = regexp.MustCompile(`(?:^| )-d (\S+)`)
	matchSetRE = regexp.MustCompile(`--match-set (\S+)`)
	vmapRE     = regexp.MustCompile(`vmap @(\S+)`)
	numgenRE   = regexp.MustCompile(`numgen random mod \d+`)
	numgenGave = regexp.MustCompile(`gave (\d+)`)
	turnRE     = regexp.MustCompile(`turn (\d+)`)
	frontendRE = regexp.MustCompile(`lookup frontend (\S+)`)
	flagsRE    = regexp.MustCompile(`\[([^\]]*)\]`)
	countRE    = regexp.MustCompile(`count (\d+), rev-NAT (\d+)`)
	slotRE     = regexp.MustCompile(`slot (\d+)`)
	markRE     = regexp.MustCompile(`^mark (0x[0-9a-f]+) -> (0x[0-9a-f]+)$`)
	revNATRE   = regexp.MustCompile(`cilium_lb4_reverse_nat\[\d+\]`)
)

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

// where is a hop's chain and rule without the table: "KUBE-NODEPORTS rule 2".
func where(h trace.Hop) string {
	if h.Rule == 0 {
		return h.Chain
	}
	return h.Chain + " rule " + strconv.Itoa(h.Rule)
}

// target is where a matched jump or goto sends the packet; "" for other verdicts.
func target(h trace.Hop) string {
	v, t, _ := strings.Cut(h.Verdict, " ")
	if v == "jump" || v == "goto" {
		return t
	}
	return ""
}

// isServiceChain says whether a chain is a Service's own (where the endpoint is chosen): iptables' KUBE-SVC-…,
// nftables' service-….
func isServiceChain(c string) bool {
	// With a traffic policy of Local, the chain of the Service's endpoints on this node: iptables' KUBE-SVL-…,
	// nftables' local-XXXXXXXX-NAMESPACE/NAME/PROTO/PORT.
	return strings.HasPrefix(c, "KUBE-SVC-") || strings.HasPrefix(c, "service-") || strings.HasPrefix(c, "KUBE-SVL-") ||
		strings.HasPrefix(c, "local-") && strings.Count(c, "/") >= 2
}

// isExternalChain: iptables' KUBE-EXT-… (since Kubernetes 1.25), nftables' external-….
func isExternalChain(c string) bool {
	return strings.HasPrefix(c, "KUBE-EXT-") || strings.HasPrefix(c, "external-")
}

// matchKeys are what a dispatching rule matches on, in its own words: "addrtype LOCAL", "--dport 31758",
// "-d 10.96.0.10/32", "ipset KUBE-NODE-PORT-TCP", "fib daddr type local", "@service-nodeports map".
func matchKeys(h trace.Hop) []string {
	var keys []string
	t := h.Text
	if strings.Contains(t, "--dst-type LOCAL") {
		keys = append(keys, "addrtype LOCAL")
	}
	if strings.Contains(t, "fib daddr type local") {
		keys = append(keys, "fib daddr type local")
	}
	if m := daddrRE.FindStringSubmatch(t); m != nil {
		keys = append(keys, "-d "+m[1])
	}
	if m := dportRE.FindStringSubmatch(t); m != nil {
		keys = append(keys, "--dport "+m[1])
	}
	if m := matchSetRE.FindStringSubmatch(t); m != nil {
		keys = append(keys, "ipset "+m[1])
	}
	if m := vmapRE.FindStringSubmatch(t); m != nil {
		keys = append(keys, "@"+m[1]+" map")
	}
	return keys
}

// dispatch is a rule that sends the packet on: "KUBE-SERVICES rule 2 (addrtype LOCAL) → KUBE-NODEPORTS".
func dispatch(h trace.Hop) string {
	s := where(h)
	if k := matchKeys(h); len(k) > 0 {
		s += " (" + strings.Join(k, ", ") + ")"
	}
	switch t := target(h); {
	case t != "":
		s += " → " + t
	case h.Verdict != "":
		s += " → " + h.Verdict
	}
	return s
}

// before is the index of the first hop of p that does the DNAT (or len(hops)): the stages before it are read
// from the hops ahead of it.
func dnatIndex(p trace.Path) int {
	for i, h := range p.Hops {
		if h.Matched && (strings.HasPrefix(h.Verdict, "dnat to") || strings.HasPrefix(h.Verdict, "connect() to")) {
			return i
		}
	}
	return len(p.Hops)
}

// match: how the destination is matched.
func (r *reader) match(p trace.Path) []seg {
	if r.family == "ebpf" {
		for i, h := range p.Hops {
			if strings.Contains(h.Function, "lb4_lookup_service") && h.Matched {
				text := h.Table + " lookup (" + h.Function + ")"
				if m := frontendRE.FindStringSubmatch(h.Text); m != nil {
					text += ": " + m[1]
				}
				if m := flagsRE.FindStringSubmatch(h.Verdict); m != nil {
					text += " [" + m[1] + "]"
				} else if h.Verdict != "" && !strings.HasPrefix(h.Verdict, "frontend") {
					text += ": " + h.Verdict
				}
				return []seg{{text, []int{i}}}
			}
		}
		return nil
	}
	var out []seg
	for i, h := range p.Hops[:dnatIndex(p)] {
		if !h.Matched || h.Table == "filter" || h.Table == "raw" || h.Table == "mangle" {
			continue
		}
		t := target(h)
		switch {
		case h.Chain == "KUBE-SERVICES" || h.Chain == "KUBE-NODEPORTS" || h.Chain == "KUBE-NODE-PORT" || h.Chain == "services":
			// KUBE-MARK-MASQ is the SNAT stage's; but IPVS mode's KUBE-NODE-PORT matches the NodePort (its ipset)
			// in the very rule that jumps there.
			if (t == "KUBE-MARK-MASQ" && h.Chain != "KUBE-NODE-PORT") || t == "KUBE-MARK-DROP" {
				continue
			}
			if t == "" && h.Verdict != "accept" {
				continue
			}
			out = append(out, seg{dispatch(h), []int{i}})
			if isServiceChain(t) || isExternalChain(t) || strings.HasPrefix(t, "KUBE-FW-") || h.Verdict == "accept" {
				return out
			}
		case isServiceChain(h.Chain) || isExternalChain(h.Chain) || h.Table == "ipvs":
			return out
		}
	}
	return out
}

// service: how the Service is found.
func (r *reader) service(p trace.Path) []seg {
	switch r.family {
	case "ebpf":
		// The frontend's slot 0 is the Service: its backend count and rev-NAT id. Of two scopes, the last.
		last := -1
		for i, h := range p.Hops {
			if strings.Contains(h.Function, "lb4_lookup_service") && h.Matched && strings.HasPrefix(h.Verdict, "frontend") {
				last = i
			}
		}
		if last < 0 {
			return nil
		}
		h := p.Hops[last]
		text := "slot 0 of " + h.Table
		if m := countRE.FindStringSubmatch(h.Verdict); m != nil {
			text += ": " + m[1] + " backends, rev-NAT " + m[2]
		}
		return []seg{{r.named(text), []int{last}}}
	case "ipvs":
		for i, h := range p.Hops {
			if h.Table == "ipvs" && h.Verdict == "" {
				return []seg{{r.named("IPVS virtual server " + strings.Join(strings.Fields(h.Text), " ")), []int{i}}}
			}
		}
		return nil
	}
	for i, h := range p.Hops[:dnatIndex(p)] {
		if h.Matched && isServiceChain(target(h)) {
			return []seg{{r.named(where(h) + " → " + target(h)), []int{i}}}
		}
	}
	return nil
}

// named puts the Service's name ahead of a text, when the trace knows it.
func (r *reader) named(text string) string {
	if r.t.Service == "" {
		return text
	}
	return r.t.Service + ": " + text
}

// choiceSummary is how the endpoint is chosen, the same for every path: iptables' statistic cascade, nftables'
// numgen map, IPVS's scheduler, Cilium's selection.
func (r *reader) choiceSummary() seg {
	t := r.t
	switch r.family {
	case "iptables":
		// The random cascade: each rule's stored probability, in rule order; the last rule takes the rest.
		type rule struct {
			n    int
			p    float64
			i    int
			path int
		}
		var rules []rule
		chain := ""
		for pi, p := range t.Paths {
			for i, h := range p.Hops {
				if !isServiceChain(h.Chain) || !strings.Contains(h.Text, "-j KUBE-SEP-") {
					continue
				}
				if !h.Matched && h.Probability == 0 {
					continue
				}
				chain = h.Chain
				if !slices.ContainsFunc(rules, func(x rule) bool { return x.n == h.Rule }) {
					rules = append(rules, rule{h.Rule, h.Probability, i, pi})
				}
			}
		}
		if len(rules) < 2 {
			return seg{}
		}
		slices.SortFunc(rules, func(a, b rule) int { return a.n - b.n })
		var parts []string
		for _, x := range rules {
			if x.p > 0 {
				parts = append(parts, fmt.Sprintf("rule %d %.11f", x.n, x.p))
			} else {
				parts = append(parts, fmt.Sprintf("rule %d the rest", x.n))
			}
		}
		return seg{text: fmt.Sprintf("%s: statistic --mode random cascade, %s", chain, strings.Join(parts, ", "))}
	case "nftables":
		for _, p := range t.Paths {
			for _, h := range p.Hops {
				if h.Matched && strings.Contains(h.Text, "numgen") {
					m := numgenRE.FindString(h.Text)
					if m == "" {
						m = "numgen"
					}
					kind := "map"
					if strings.Contains(h.Text, "vmap") {
						kind = "vmap"
					}
					return seg{text: fmt.Sprintf("%s: %s %s", where(h), m, kind)}
				}
			}
		}
	case "ipvs":
		for _, p := range t.Paths {
			for _, h := range p.Hops {
				if h.Table == "ipvs" && h.Verdict != "" && h.Reason != "" {
					// The virtual server's line ends in its scheduler ("TCP  172.18.0.2:30080 rr").
					f := strings.Fields(h.Chain)
					how, _, _ := strings.Cut(h.Reason, ";")
					text := "IPVS scheduler"
					if len(f) > 0 {
						text += " " + f[len(f)-1]
					}
					return seg{text: text + " (" + how + ")"}
				}
			}
		}
	case "ebpf":
		for _, p := range t.Paths {
			for _, h := range p.Hops {
				if selectsBackend(h) && h.Matched {
					fn, _, _ := strings.Cut(h.Function, " → ")
					rule := h.Reason
					if i := strings.LastIndex(rule, ": slot"); i >= 0 {
						rule = rule[:i]
					}
					rule = strings.TrimPrefix(strings.TrimPrefix(rule, "random: "), "sock_select_slot: ")
					if h.Choice == trace.ChoiceMaglev && rule == "" {
						rule = "the flow's hash picks a slot of the Maglev table"
					}
					if rule == "" {
						return seg{text: fn}
					}
					return seg{text: fn + ": " + rule}
				}
			}
		}
	}
	return seg{}
}

// selectsBackend says whether an ebpf hop is Cilium's backend selection: per packet (lb4_select_backend_id_*)
// or at connect() by the socket LB (sock_select_slot).
func selectsBackend(h trace.Hop) bool {
	return strings.Contains(h.Function, "lb4_select_backend_id") || strings.HasPrefix(h.Function, "sock_select_slot")
}

// choice: which endpoint this path takes, and with what chance or turn.
// affinityChoice is kube-proxy's session affinity as the choice: the rule that matched the client's entry chose,
// no random draw (nil when the path chose afresh).
func affinityChoice(p trace.Path) []seg {
	if p.Affinity == "" {
		return nil
	}
	for i, h := range p.Hops {
		if h.Matched && h.Ref() == p.Affinity {
			text := "session affinity: " + p.Affinity
			if t := target(h); t != "" {
				text += " → " + t
			}
			return []seg{{text + " (this client's entry)", []int{i}}}
		}
	}
	return nil
}

func (r *reader) choice(p trace.Path) []seg {
	chance := ""
	if p.Endpoint != nil && p.Endpoint.Probability > 0 {
		chance = " (" + percent(p.Endpoint.Probability) + ")"
	}
	switch r.family {
	case "ebpf":
		for i, h := range p.Hops {
			if !h.Matched {
				continue
			}
			switch {
			case selectsBackend(h):
				text := h.Verdict
				if m := slotRE.FindStringSubmatch(h.Text); m != nil && !strings.HasPrefix(h.Verdict, "LUT") {
					text = "slot " + m[1] + " → " + h.Verdict
				}
				if h.Choice == trace.ChoiceMaglev {
					text = "Maglev table share: " + text
				}
				return []seg{{text + chance, []int{i}}}
			case strings.Contains(h.Function, "ct_lazy_lookup4") && strings.HasPrefix(h.Verdict, "established"):
				return []seg{{h.Table + ": " + h.Verdict + " (no new choice)", []int{i}}}
			case p.Affinity != "" && h.Ref() == p.Affinity:
				return []seg{{h.Table + ": " + h.Verdict + " (session affinity)", []int{i}}}
			}
		}
		return nil
	case "ipvs":
		for i, h := range p.Hops {
			if h.Table == "ipvs" && h.Matched && strings.HasPrefix(h.Verdict, "dnat to") {
				text := "real server " + strings.TrimPrefix(h.Verdict, "dnat to ")
				if m := turnRE.FindStringSubmatch(h.Reason); m != nil {
					text = "turn " + m[1] + " → " + text
				}
				return []seg{{text + chance, []int{i}}}
			}
		}
		return nil
	case "nftables":
		if a := affinityChoice(p); a != nil {
			return a
		}
		for i, h := range p.Hops {
			if h.Matched && strings.Contains(h.Text, "numgen") {
				text := "gave ?"
				if m := numgenGave.FindStringSubmatch(h.Reason); m != nil {
					text = "gave " + m[1]
				}
				if t := target(h); t != "" {
					text += " → " + t
				} else if strings.HasPrefix(h.Verdict, "dnat to ") {
					text += " → " + strings.TrimPrefix(h.Verdict, "dnat to ")
				}
				return []seg{{text + chance, []int{i}}}
			}
		}
		return nil
	}
	// iptables: the rule of the Service's chain that sent the packet to an endpoint's chain.
	if a := affinityChoice(p); a != nil {
		return a
	}
	for i, h := range p.Hops {
		if h.Matched && isServiceChain(h.Chain) && strings.HasPrefix(target(h), "KUBE-SEP-") {
			text := fmt.Sprintf("rule %d → %s", h.Rule, target(h))
			if h.Probability == 0 && len(r.t.Endpoints) == 1 {
				text += " (the only endpoint)"
			}
			return []seg{{text + chance, []int{i}}}
		}
	}
	return nil
}

// dnat: the rewrite of the destination to the endpoint.
func (r *reader) dnat(p trace.Path) []seg {
	i := dnatIndex(p)
	if i == len(p.Hops) {
		return nil
	}
	h := p.Hops[i]
	// The place, then what it did: where every path does it in the same place, the place is said once.
	place := where(h)
	switch {
	case r.family == "ebpf":
		fn := h.Function
		if strings.HasSuffix(fn, "lb4_dnat_request") {
			// lb4_dnat_request rewrites the packet with lb4_xlate (bpf/lib/lb.h).
			fn += " → lb4_xlate"
		}
		place = fn + " (" + h.Table + ")"
	case h.Table == "ipvs":
		// "-> 10.244.0.4:8080 Masq 1 0 3": the address and the forwarding method, not the counters.
		f := strings.Fields(strings.TrimPrefix(h.Text, "->"))
		place = "IPVS real server " + strings.Join(f[:min(2, len(f))], " ")
	}
	return []seg{{place + ":", []int{i}}, {h.Verdict, []int{i}}}
}

// setsMasqMark says whether a hop sets kube-proxy's masquerade mark (0x4000) on a packet that did not have it.
func setsMasqMark(h trace.Hop) bool {
	for _, c := range h.Changes {
		if m := markRE.FindStringSubmatch(c); m != nil {
			from, _ := strconv.ParseUint(m[1], 0, 32)
			to, _ := strconv.ParseUint(m[2], 0, 32)
			if from&0x4000 == 0 && to&0x4000 != 0 {
				return true
			}
		}
	}
	return false
}

// snat: who asks for the masquerade (the mark) and who does it, or why nothing does.
func (r *reader) snat(p trace.Path) []seg {
	var out []seg
	if r.family != "ebpf" {
		for i, h := range p.Hops {
			if !h.Matched || !setsMasqMark(h) {
				continue
			}
			// iptables marks in KUBE-MARK-MASQ: the rule that jumped there is who asks.
			if h.Chain == "KUBE-MARK-MASQ" {
				for j := i - 1; j >= 0; j-- {
					if p.Hops[j].Matched && target(p.Hops[j]) == "KUBE-MARK-MASQ" {
						out = append(out, seg{"mark 0x4000: " + where(p.Hops[j]) + " → KUBE-MARK-MASQ", []int{j, i}})
						break
					}
				}
				if len(out) == 0 {
					out = append(out, seg{"mark 0x4000: KUBE-MARK-MASQ", []int{i}})
				}
			} else {
				out = append(out, seg{"mark 0x4000: " + where(h), []int{i}})
			}
			break
		}
	}
	for i, h := range p.Hops {
		if h.Matched && (strings.HasPrefix(h.Verdict, "masquerade") || strings.HasPrefix(h.Verdict, "snat to")) {
			w := where(h)
			if r.family == "ebpf" {
				w = h.Function + " (" + h.Table + ")"
			}
			return append(out, seg{w + ": " + h.Verdict, []int{i}})
		}
	}
	if p.Verdict != trace.Delivered {
		return nil // the fallback says why
	}
	// Delivered without a masquerade: say so only when the trace walked where one would be.
	for i, h := range p.Hops {
		switch {
		case r.family == "ebpf" && h.Matched && strings.Contains(h.Function, "__lookup_ip4_endpoint") && strings.HasPrefix(h.Verdict, "local endpoint"):
			return append(out, seg{None + ": " + h.Table + " (" + h.Function + ") finds a local endpoint; delivered without SNAT", []int{i}})
		case r.family != "ebpf" && h.Matched && h.Verdict == "return" && strings.Contains(h.Chain, "POSTROUTING"):
			return append(out, seg{None + ": " + where(h) + " returns (no mark 0x4000)", []int{i}})
		}
	}
	if r.family == "ebpf" {
		for i, h := range p.Hops {
			if strings.Contains(h.Function, "__lookup_ip4_endpoint") || strings.HasPrefix(h.Verdict, "connect() to") {
				return append(out, seg{None + ": no SNAT on this path", []int{i}})
			}
		}
		return out
	}
	for _, h := range p.Hops {
		if h.Hook == "POSTROUTING" {
			return append(out, seg{text: None + ": no POSTROUTING rule masquerades"})
		}
	}
	return out
}

// source: the source address the pod sees.
func (r *reader) source(p trace.Path) []seg {
	if p.Verdict != trace.Delivered || p.SNAT == "" {
		return nil
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
	var by []string
	if strings.Contains(rp.Text, "conntrack entry") && !strings.Contains(rp.Text, "NodePort conntrack entry") {
		by = append(by, "conntrack")
	}
	if strings.Contains(rp.Text, "IPVS's connection entry") {
		by = append(by, "IPVS's connection entry")
	}
	if strings.Contains(rp.Text, "cilium_snat_v4_external") {
		by = append(by, "cilium_snat_v4_external")
	}
	if m := revNATRE.FindString(rp.Text); m != "" {
		by = append(by, m)
	}
	text := fmt.Sprintf("the pod answers %s", rp.To)
	switch {
	case rp.From == rp.AsSeenFrom && rp.To == rp.AsSeenTo:
		text += " from " + rp.From + "; nothing to undo"
	case len(by) > 0:
		text += "; " + strings.Join(by, ", then ") + " turns it into " + rp.AsSeenFrom + " → " + rp.AsSeenTo
	default:
		text += "; it comes back as " + rp.AsSeenFrom + " → " + rp.AsSeenTo
	}
	if rp.Bypasses {
		text += "; but it bypasses this node: the client drops it, the connection fails"
	}
	return []seg{{text: text}}
}

func percent(p float64) string { return strconv.FormatFloat(p*100, 'f', 2, 64) + "%" }
