package ipvs

import (
	"fmt"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/iptables"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// This file is the IPVS engine's explanation face. IPVS mode keeps kube-proxy's iptables rules around the IPVS
// table: the iptables engine stamps and explains those hops (the match, the mark, the masquerade); this engine
// the virtual server (the Service), its scheduler's choice and the real server's DNAT.

// stampChoice marks the hop of the chosen real server: its turn in the scheduler's order, or the entry that
// decided it. At holds how the virtual server schedules, for ChoiceRule.
func stampChoice(h *trace.Hop, v *VirtualServer, rs *RealServer, why string, turn int) {
	says := "real server " + rs.Addr().String()
	means := v.Scheduler
	switch {
	case turn < 0:
		means = trace.MeansEstablished
		says += " (" + why + ")"
	case turn > 0:
		says = fmt.Sprintf("turn %d → %s", turn, says)
	}
	how, _, _ := strings.Cut(why, ";")
	h.Parts = append(h.Parts, trace.Part{Stage: trace.StageChoice, At: "IPVS scheduler " + v.Scheduler + " (" + how + ")", Says: says, Means: means})
}

// Guide says a stage in the guide's terms: the iptables engine's sentences for the rules IPVS mode keeps, this
// engine's for what IPVS does.
func (Engine) Guide(t dataplanes.Told) string {
	switch t.Stage {
	case dataplanes.TellService:
		return "In IPVS mode the Service is an IPVS virtual server per address and port; there is no KUBE-SVC chain."
	case dataplanes.TellChoice:
		if t.Means(trace.MeansEstablished) {
			return "An existing IPVS connection entry (or a persistent service's template) names the real server: no new choice."
		}
		if t.Means("rr") {
			return "No random rules: IPVS's scheduler hands new connections to the real servers in turn (round robin)."
		}
		for _, p := range t.Parts {
			if p.Means != "" {
				return "No random rules: IPVS's " + p.Means + " scheduler picks the real server for each new connection."
			}
		}
		return "No random rules: IPVS's scheduler picks the real server for each new connection."
	case dataplanes.TellDNAT:
		return "IPVS rewrites the destination to the real server (Masq forwarding): the guide's KUBE-SEP DNAT."
	}
	return iptables.IPVSModeGuide(t)
}

// ChoiceRule is the virtual server's scheduler and how it picks.
func (Engine) ChoiceRule(t *trace.Trace) string {
	part, _ := t.FirstPart(trace.StageChoice, func(h trace.Hop, p trace.Part) bool {
		return h.Table == Table && p.Means != trace.MeansEstablished
	})
	return part.At
}

// GuideNote is the iptables engine's, for the chains IPVS mode keeps.
func (Engine) GuideNote(t *trace.Trace) string { return iptables.Engine{}.GuideNote(t) }

var _ dataplanes.Explainer = Engine{}
