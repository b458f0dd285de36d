package nftables

import (
	"slices"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// This file is the nftables engine's explanation face: the stage each hop of kube-proxy's nftables table does,
// stamped as the walk makes the hop, and the guide's sentences, which say what stands here for the iptables
// chains the guide shows (the services chain's verdict maps for KUBE-SERVICES and KUBE-NODEPORTS, service-…
// for KUBE-SVC, endpoint-… or a numgen map for KUBE-SEP, masquerading for KUBE-POSTROUTING).

// What the nftables engine's parts mean (trace.Part.Means), besides a dispatch's map ("@service-ips").
const (
	meansExternal = "external" // reached through the Service's external-… chain (iptables' KUBE-EXT)
	meansLocal    = "local"    // a traffic policy of Local: the local-… chain of this node's endpoints
	meansNumgen   = "numgen"   // a numgen (or hash) draw chooses the endpoint
	meansEndpoint = "endpoint" // the endpoint's endpoint-… chain DNATs (iptables' KUBE-SEP)
	meansDirect   = "direct"   // the service chain sends the packet to an endpoint's chain without a draw
)

// draw is a random choice the rule being evaluated made: the generator and what it gave.
type draw struct {
	generator string // "numgen random mod 3"
	gave      string // "0", or "a matching value"
}

// serviceChain says whether a chain is a Service's own, where the endpoint is chosen: service-…, and with a
// traffic policy of Local the chain of this node's endpoints, local-HASH-NAMESPACE/NAME/PROTO/PORT.
func serviceChain(c string) bool {
	return strings.HasPrefix(c, "service-") || strings.HasPrefix(c, "local-") && strings.Count(c, "/") >= 2
}

// dispatchMaps are the verdict maps a rule looks the packet up in ("@service-ips") and whether it tests that the
// destination is the node's own (fib daddr type local): what the services chain dispatches on.
func dispatchKeys(r *Rule) (keys []string, maps []string) {
	for _, s := range r.Stmts {
		switch {
		case s.Kind == SMatch && s.Left != nil && s.Left.Kind == KFib && s.Right != nil && s.Op != "!=":
			keys = append(keys, renderExpr(s.Left, tOther)+" "+renderExpr(s.Right, tFibType))
		case s.Kind == SVmap && s.Right != nil && s.Right.Kind == KSetRef:
			keys = append(keys, "@"+s.Right.Str+" map")
			maps = append(maps, "@"+s.Right.Str)
		}
	}
	return keys, maps
}

// stamp marks a hop of kube-proxy's table with the stage it does, once the walk knows its result.
func (e *eval) stamp(h *trace.Hop, r *Rule, d *draw) {
	target := ""
	if v, t, ok := strings.Cut(h.Verdict, " "); ok && (v == "goto" || v == "jump") {
		target = t
	}
	if h.Chain == "services" {
		// A dispatch; the maps of one that did not match still say what stands for KUBE-SERVICES (GuideNote).
		keys, maps := dispatchKeys(r)
		if len(maps) > 0 && (!h.Matched || target != "" || h.Verdict == "accept") {
			says := h.Where()
			if len(keys) > 0 {
				says += " (" + strings.Join(keys, ", ") + ")"
			}
			if target != "" {
				says += " → " + target
			} else if h.Verdict != "" {
				says += " → " + h.Verdict
			}
			h.Does(trace.StageMatch, says, maps[0])
		}
	}
	if !h.Matched {
		return
	}
	if serviceChain(target) {
		means := ""
		switch {
		case strings.HasPrefix(target, "local-"):
			means = meansLocal
		case strings.HasPrefix(h.Chain, "external-"):
			means = meansExternal
		}
		h.Does(trace.StageService, h.Where()+" → "+target, means)
	}
	switch {
	case e.affinity:
		h.Does(trace.StageChoice, "session affinity: "+h.Ref()+" → "+target+" (this client's entry)", trace.MeansAffinity)
	case d != nil:
		says := "gave " + d.gave
		if target != "" {
			says += " → " + target
		} else if to, ok := strings.CutPrefix(h.Verdict, "dnat to "); ok {
			says += " → " + to
		}
		kind := "map"
		if slices.ContainsFunc(r.Stmts, func(s *Stmt) bool { return s.Kind == SVmap }) {
			kind = "vmap"
		}
		// At holds how the rule draws, for ChoiceRule: "service-… rule 1: numgen random mod 3 map".
		h.Parts = append(h.Parts, trace.Part{Stage: trace.StageChoice, At: h.Where() + ": " + d.generator + " " + kind, Says: says, Means: meansNumgen})
	case serviceChain(h.Chain) && strings.HasPrefix(target, "endpoint-"):
		h.Does(trace.StageChoice, h.Where()+" → "+target+" (no draw)", meansDirect)
	}
	switch {
	case strings.HasPrefix(h.Verdict, "dnat to") || strings.HasPrefix(h.Verdict, "redirect to"):
		means := ""
		switch {
		case strings.HasPrefix(h.Verdict, "redirect to"):
			means = trace.MeansRedirect
		case strings.HasPrefix(h.Chain, "endpoint-"):
			means = meansEndpoint
		}
		if d != nil && serviceChain(h.Chain) {
			means = meansNumgen // the numgen map gives the address itself
		}
		h.DoesAt(trace.StageDNAT, h.Where(), h.Verdict, means)
	case strings.HasPrefix(h.Verdict, "masquerade") || strings.HasPrefix(h.Verdict, "snat to"):
		h.Does(trace.StageSNAT, h.Where()+": "+h.Verdict, "")
	case h.Verdict == "return" && h.Chain == "masquerading":
		h.Does(trace.StageSNAT, h.Where()+" returns (no mark 0x4000)", trace.MeansNone)
	}
}

// stampMark marks a hop that sets kube-proxy's masquerade mark (0x4000) on a packet that did not have it.
func stampMark(h *trace.Hop, from, to uint32) {
	if from&0x4000 != 0 || to&0x4000 == 0 || slices.ContainsFunc(h.Parts, func(p trace.Part) bool { return p.Stage == trace.StageMark }) {
		return
	}
	means := ""
	if strings.HasPrefix(h.Chain, "external-") {
		means = meansExternal
	}
	h.Does(trace.StageMark, "mark 0x4000: "+h.Where(), means)
}

// Guide says a stage in the guide's terms.
func (Engine) Guide(t dataplanes.Told) string {
	switch t.Stage {
	case dataplanes.TellMatch:
		var maps []string
		for _, m := range []string{"@service-ips", "@service-nodeports"} {
			if t.Means(m) {
				maps = append(maps, m)
			}
		}
		return "Where the guide's KUBE-SERVICES and KUBE-NODEPORTS test rule after rule, the services chain looks the destination up in one verdict map (" + strings.Join(maps, ", ") + ")."
	case dataplanes.TellService:
		switch {
		case t.Means(meansLocal):
			return "With a traffic policy of Local, which the guide does not show, the packet reaches the Service's local-… chain (iptables' KUBE-SVL), which holds only this node's endpoints, in place of its service-… chain."
		case t.Means(meansExternal):
			return "The guide's KUBE-SVC chain is the service-… chain here, reached through the external-… chain (iptables' KUBE-EXT)."
		}
		return "The guide's KUBE-SVC chain is the service-… chain here."
	case dataplanes.TellChoice:
		if t.Means(trace.MeansAffinity) {
			return "Session affinity, which the guide does not show: this client's address is in the endpoint's affinity-… set, so the service chain sends it back to that endpoint before the numgen map draws; a new client gets 1/N."
		}
		if t.Means(meansDirect) && !t.Means(meansNumgen) {
			return "The service chain sends the packet straight to an endpoint's chain, with no draw (the guide's KUBE-SVC chain with one endpoint)."
		}
		return "In place of the guide's cascade of statistic rules, one numgen random mod N map gives every endpoint exactly 1/N."
	case dataplanes.TellDNAT:
		switch {
		case t.Means(meansEndpoint):
			return "The guide's KUBE-SEP chain is the endpoint-… chain here; it DNATs to the pod."
		case t.Means(meansNumgen):
			return "The guide's KUBE-SEP DNAT is done by the service chain's numgen map itself: no per-endpoint chain."
		}
		return dataplanes.NotKubeProxyDNAT(t)
	case dataplanes.TellSNAT:
		return "The guide's KUBE-MARK-MASQ and KUBE-POSTROUTING are a mark set in kube-proxy's own chains and the masquerading chain that masquerades marked packets."
	case dataplanes.TellReply:
		return "As in the guide, conntrack undoes both translations on the way back, so the client sees the answer come from where it sent."
	}
	return ""
}

// ChoiceRule is how the service chain draws: the rule and its generator ("service-… rule 1: numgen random mod 3
// map").
func (Engine) ChoiceRule(t *trace.Trace) string {
	part, _ := t.FirstPart(trace.StageChoice, func(h trace.Hop, p trace.Part) bool { return h.Matched && p.Means == meansNumgen })
	return part.At
}

// GuideNote names what stands here for the guide's iptables chains, as the trace met them.
func (Engine) GuideNote(t *trace.Trace) string {
	var eq []string
	add := func(guide, nft string) {
		if s := guide + " is " + nft; !slices.Contains(eq, s) {
			eq = append(eq, s)
		}
	}
	for _, p := range t.Paths {
		for _, h := range p.Hops {
			for _, part := range h.Parts {
				switch {
				case part.Stage == trace.StageMatch && part.Means == "@service-ips":
					add("KUBE-SERVICES", "the service-ips map")
				case part.Stage == trace.StageMatch && part.Means == "@service-nodeports" && h.Matched:
					add("KUBE-NODEPORTS", "the service-nodeports map")
				}
			}
			switch {
			case strings.HasPrefix(h.Chain, "external-"):
				add("KUBE-EXT-…", h.Chain)
			case strings.HasPrefix(h.Chain, "service-") && slices.ContainsFunc(h.Parts, func(p trace.Part) bool { return p.Means == meansNumgen }):
				add("KUBE-SVC-…", h.Chain+" (numgen)")
			case strings.HasPrefix(h.Chain, "endpoint-"):
				add("KUBE-SEP-…", h.Chain)
			case h.Chain == "masquerading":
				add("KUBE-POSTROUTING", "masquerading")
			}
		}
	}
	if len(eq) == 0 {
		return ""
	}
	return "in nftables mode the guide's " + strings.Join(eq, ", ") + "."
}

var _ dataplanes.Explainer = Engine{}
