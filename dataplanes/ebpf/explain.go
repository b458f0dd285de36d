package ebpf

import (
	"regexp"
	"slices"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// This file is the ebpf engine's explanation face: the stage each step of Cilium's datapath does, stamped on a
// branch's hops when the walk ends it (a step's verdict can still change until then: a drop is written on the
// last step), and the guide's sentences, which say what Cilium does in place of the iptables chains the guide
// shows. The steps are known by the datapath functions this walk names them after.

// What the ebpf engine's parts mean (trace.Part.Means).
const (
	meansDrop   = "drop"   // the Service lookup drops the packet (its reason in the part)
	meansRandom = "random" // lb4_select_backend_id_random
	meansMaglev = "maglev" // a share of the Maglev table
	meansSocket = "socket" // the socket LB: sock_select_slot at connect(), connect() to the backend
)

var (
	frontendRE = regexp.MustCompile(`lookup frontend (\S+)`)
	flagsRE    = regexp.MustCompile(`\[([^\]]*)\]`)
	countRE    = regexp.MustCompile(`count (\d+), rev-NAT (\d+)`)
	slotRE     = regexp.MustCompile(`slot (\d+)`)
)

// selectsBackend says whether a step is Cilium's backend selection: per packet (lb4_select_backend_id_*) or at
// connect() by the socket LB (sock_select_slot).
func selectsBackend(h trace.Hop) bool {
	return strings.Contains(h.Function, "lb4_select_backend_id") || strings.HasPrefix(h.Function, "sock_select_slot")
}

// stamp marks a finished branch's steps with the stages they do. affinity is the Ref of the step where
// cilium_lb4_affinity held the client's backend. The texts are built from the values the walk wrote in the
// steps' own words (frontend, flags, slot).
func stamp(hops []trace.Hop, affinity string) {
	for i := range hops {
		h := &hops[i]
		h.Parts = nil
		if !h.Matched {
			continue
		}
		fn := h.Function
		switch {
		case strings.Contains(fn, "lb4_lookup_service"):
			says := h.Table + " lookup (" + fn + ")"
			if m := frontendRE.FindStringSubmatch(h.Text); m != nil {
				says += ": " + m[1]
			}
			means := ""
			if m := flagsRE.FindStringSubmatch(h.Verdict); m != nil {
				says += " [" + m[1] + "]"
			} else if h.Verdict != "" && !strings.HasPrefix(h.Verdict, "frontend") {
				says += ": " + h.Verdict
				if strings.HasPrefix(h.Verdict, "drop") {
					means = meansDrop
				}
			}
			h.Does(trace.StageMatch, says, means)
			if strings.HasPrefix(h.Verdict, "frontend") {
				says := "slot 0 of " + h.Table
				if m := countRE.FindStringSubmatch(h.Verdict); m != nil {
					says += ": " + m[1] + " backends, rev-NAT " + m[2]
				}
				h.Does(trace.StageService, says, "")
			}
		case selectsBackend(*h):
			says := h.Verdict
			if m := slotRE.FindStringSubmatch(h.Text); m != nil && !strings.HasPrefix(h.Verdict, "LUT") {
				says = "slot " + m[1] + " → " + h.Verdict
			}
			name, _, _ := strings.Cut(fn, " → ")
			rule := h.Reason
			if i := strings.LastIndex(rule, ": slot"); i >= 0 {
				rule = rule[:i]
			}
			rule = strings.TrimPrefix(strings.TrimPrefix(rule, "random: "), "sock_select_slot: ")
			means := meansRandom
			switch {
			case h.Choice == trace.ChoiceMaglev:
				says = "Maglev table share: " + says
				means = meansMaglev
				if rule == "" {
					rule = "the flow's hash picks a slot of the Maglev table"
				}
			case strings.HasPrefix(fn, "sock_select_slot"):
				means = meansSocket
			}
			at := name
			if rule != "" {
				at += ": " + rule
			}
			// At holds how the datapath selects, for ChoiceRule.
			h.Parts = append(h.Parts, trace.Part{Stage: trace.StageChoice, At: at, Says: says, Means: means})
		case strings.Contains(fn, "ct_lazy_lookup4") && strings.HasPrefix(h.Verdict, "established"):
			h.Does(trace.StageChoice, h.Table+": "+h.Verdict+" (no new choice)", trace.MeansEstablished)
		case affinity != "" && h.Ref() == affinity:
			h.Does(trace.StageChoice, h.Table+": "+h.Verdict+" (session affinity)", trace.MeansAffinity)
		}
		switch {
		case strings.HasPrefix(h.Verdict, "dnat to"):
			place := fn
			if strings.HasSuffix(fn, "lb4_dnat_request") {
				place += " → lb4_xlate" // lb4_dnat_request rewrites the packet with lb4_xlate (bpf/lib/lb.h)
			}
			h.DoesAt(trace.StageDNAT, place+" ("+h.Table+")", h.Verdict, "")
		case strings.HasPrefix(h.Verdict, "connect() to"):
			h.DoesAt(trace.StageDNAT, fn+" ("+h.Table+")", h.Verdict, meansSocket)
			h.Does(trace.StageSNAT, "no SNAT on this path", trace.MeansNone)
		case strings.HasPrefix(h.Verdict, "masquerade") || strings.HasPrefix(h.Verdict, "snat to"):
			h.Does(trace.StageSNAT, fn+" ("+h.Table+"): "+h.Verdict, "")
		case strings.Contains(fn, "__lookup_ip4_endpoint") && strings.HasPrefix(h.Verdict, "local endpoint"):
			h.Does(trace.StageSNAT, h.Table+" ("+fn+") finds a local endpoint; delivered without SNAT", trace.MeansNone)
		}
	}
	// A backend on another node without a masquerade step: delivered as the client sent it.
	for i := range hops {
		if strings.Contains(hops[i].Function, "__lookup_ip4_endpoint") && len(hops[i].Parts) == 0 {
			hops[i].Does(trace.StageSNAT, "no SNAT on this path", trace.MeansNone)
		}
	}
}

// Guide says a stage in the guide's terms.
func (Engine) Guide(t dataplanes.Told) string {
	switch t.Stage {
	case dataplanes.TellMatch:
		sentence := "Where the guide's KUBE-SERVICES and KUBE-NODEPORTS match rules, Cilium looks the frontend up in the cilium_lb4_services_v2 hash map, before netfilter sees the packet."
		for _, p := range t.Parts {
			if p.Means == meansDrop {
				if _, why, ok := strings.Cut(p.Says, ": drop"); ok {
					sentence += " Here the lookup drops it" + why + "."
				}
				break
			}
		}
		return sentence
	case dataplanes.TellService:
		return "The Service is the frontend's slot 0 (its backend count and rev-NAT id); there is no KUBE-SVC chain."
	case dataplanes.TellChoice:
		switch {
		case t.Means(trace.MeansAffinity):
			return "Session affinity, which the guide does not show: cilium_lb4_affinity holds this client's backend, so no new choice is made; a new client gets 1/N."
		case t.Means(meansMaglev):
			return "In place of the guide's statistic rules, Maglev: the flow's hash picks the backend from a lookup table, each backend's chance its share of the table."
		case t.Means(trace.MeansEstablished):
			return "The flow's conntrack entry already names the backend: no new choice."
		case t.Means(meansSocket):
			return "In place of the guide's statistic rules, the socket LB's sock_select_slot picks a backend slot at random when the socket connects, 1/N each."
		}
		return "In place of the guide's statistic rules, lb4_select_backend_id_random picks a backend slot at random, 1/N each."
	case dataplanes.TellDNAT:
		if t.Means(meansSocket) {
			return "No packet to the ClusterIP ever exists: the socket LB connects the socket straight to the backend."
		}
		return "lb4_dnat_request rewrites the destination in the packet (lb4_xlate), and a CT_SERVICE entry keeps the backend: the guide's KUBE-SEP DNAT and its conntrack entry in one."
	case dataplanes.TellSNAT:
		return "No mark and no KUBE-POSTROUTING: Cilium SNATs to the node's address itself (tail_nodeport_nat_egress_ipv4) when the backend is on another node; a backend on this node gets the packet as the client sent it."
	case dataplanes.TellReply:
		return "No netfilter conntrack: Cilium's own maps (cilium_snat_v4_external, cilium_lb4_reverse_nat) undo the translations in bpf_host."
	}
	return ""
}

// ChoiceRule is how the datapath selects a backend: the function and its rule.
func (Engine) ChoiceRule(t *trace.Trace) string {
	part, _ := t.FirstPart(trace.StageChoice, func(h trace.Hop, _ trace.Part) bool { return selectsBackend(h) })
	return part.At
}

// GuideNote names the Cilium functions the trace went through, the guide's steps in bpf_host: the common ones
// once, then each path's own ending (SNAT, or delivery to a pod of this node).
func (Engine) GuideNote(t *trace.Trace) string {
	var per [][]string
	program := ""
	for _, p := range t.Paths {
		var steps []string
		add := func(s string) {
			if !slices.Contains(steps, s) {
				steps = append(steps, s)
			}
		}
		for _, h := range p.Hops {
			if program == "" && h.Chain != "" {
				program = h.Chain
			}
			fn := strings.TrimSuffix(h.Function, " (wildcard)")
			switch {
			case strings.Contains(fn, "lb4_lookup_service"):
				for _, f := range strings.Split(fn, " → ") {
					add(f)
				}
			case strings.Contains(fn, "lb4_select_backend_id"):
				f, _, _ := strings.Cut(fn, " → ")
				add(f)
			case strings.HasPrefix(fn, "sock_select_slot"):
				add("sock_select_slot") // the socket LB's choice, at connect()
			case strings.HasSuffix(fn, "lb4_dnat_request"):
				// lb4_dnat_request rewrites the packet with lb4_xlate (bpf/lib/lb.h).
				add("lb4_xlate")
			case strings.Contains(fn, "tail_nodeport_nat_egress_ipv4") && h.Matched:
				add("snat (" + fn + ")")
			case strings.Contains(fn, "__lookup_ip4_endpoint") && h.Matched && strings.HasPrefix(h.Verdict, "local endpoint"):
				add("local delivery")
			}
		}
		if len(steps) > 0 {
			per = append(per, steps)
		}
	}
	if len(per) == 0 {
		return ""
	}
	n := len(per[0])
	for _, s := range per[1:] {
		m := 0
		for m < n && m < len(s) && s[m] == per[0][m] {
			m++
		}
		n = m
	}
	chain := append([]string{}, per[0][:n]...)
	var ends []string
	for _, s := range per {
		if e := strings.Join(s[n:], " → "); e != "" && !slices.Contains(ends, e) {
			ends = append(ends, e)
		}
	}
	if len(ends) > 0 {
		chain = append(chain, strings.Join(ends, " / "))
	}
	// The object the walk's first program comes from (Cilium's bpf/ sources).
	object := map[string]string{"cil_sock4_connect": "bpf_sock", "cil_from_container": "bpf_lxc"}[program]
	if object == "" {
		object = "bpf_host"
	}
	if program != "" {
		chain = append([]string{program}, chain...)
	}
	return "no KUBE-* chains here: Cilium does the guide's steps in " + object + " functions, each map lookup in one: " +
		strings.Join(chain, " → ") + "."
}

var _ dataplanes.Explainer = Engine{}
