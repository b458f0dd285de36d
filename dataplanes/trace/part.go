package trace

import "strconv"

// Stage is a step of a Service's translation, in the order the guide's NodePort and ClusterIP chapters walk
// them. An engine stamps each hop that does one with a Part as it builds the hop: it knows what the hop is, so
// nothing downstream re-reads the hop's text to find out (inspect/stages reads the stamps).
type Stage string

const (
	StageMatch   Stage = "match"   // the rule or lookup that matches the Service's address and port
	StageService Stage = "service" // the Service's own chain, virtual server or frontend slot is reached
	StageChoice  Stage = "choice"  // the endpoint is chosen
	StageDNAT    Stage = "dnat"    // the destination is rewritten to the endpoint
	StageMark    Stage = "mark"    // the masquerade is asked for (kube-proxy's mark), nothing rewritten yet
	StageSNAT    Stage = "snat"    // the source is rewritten, or said not to be (Means "none")
)

// Words a Part means that readers other than the engine's own rely on.
const (
	// MeansNone: an SNAT part that says none happens on this path, and why (a later one has the last word).
	MeansNone = "none"
	// MeansAffinity: a choice made by session affinity, not at random (no chance applies).
	MeansAffinity = "affinity"
	// MeansEstablished: no choice: the flow's entry names the endpoint already (no chance applies).
	MeansEstablished = "established"
	// MeansRedirect: a DNAT to the node itself (REDIRECT, nft redirect): a socket of the node answers.
	MeansRedirect = "redirect"
)

// Part is what a hop does at a stage, in the engine's own names. A rule that did not match may carry the part it
// would have done (a statistic rule of the cascade the packet passed by, a dispatch map it was not in): what the
// engine's sentences say of the rules around the packet; readers of what the packet met take matched hops only.
type Part struct {
	Stage Stage `json:"stage"`
	// At is the place, when it is said apart from what is done there (a DNAT's chain and rule): a reader says
	// it once where every path does its part in the same place.
	At string `json:"at,omitempty"`
	// Says is what the hop does at the stage: "KUBE-SERVICES rule 2 (addrtype LOCAL) → KUBE-NODEPORTS",
	// "dnat to 10.244.1.2:80", "slot 1 → backend 1".
	Says string `json:"says"`
	// Means is the engine's word for the kind of thing the hop does there ("nodeport", "local", "numgen", …, or
	// one of the Means constants): its guide sentences key on it.
	Means string `json:"means,omitempty"`
}

// Does stamps the hop with a part.
func (h *Hop) Does(stage Stage, says, means string) {
	h.Parts = append(h.Parts, Part{Stage: stage, Says: says, Means: means})
}

// DoesAt stamps the hop with a part said as a place and what is done there.
func (h *Hop) DoesAt(stage Stage, at, says, means string) {
	h.Parts = append(h.Parts, Part{Stage: stage, At: at, Says: says, Means: means})
}

// Part returns the hop's part at a stage.
func (h Hop) Part(stage Stage) (Part, bool) {
	for _, p := range h.Parts {
		if p.Stage == stage {
			return p, true
		}
	}
	return Part{}, false
}

// Where is a hop's chain and rule without its table: "KUBE-NODEPORTS rule 2"; the chain alone for its policy.
func (h Hop) Where() string {
	if h.Rule == 0 {
		return h.Chain
	}
	return h.Chain + " rule " + strconv.Itoa(h.Rule)
}

// FirstPart is the first part at a stage, over every path's hops in order, that keep takes.
func (t *Trace) FirstPart(stage Stage, keep func(Hop, Part) bool) (Part, bool) {
	for _, p := range t.Paths {
		for _, h := range p.Hops {
			if part, ok := h.Part(stage); ok && keep(h, part) {
				return part, true
			}
		}
	}
	return Part{}, false
}
