package dataplanes

import (
	"slices"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// Explainer is the face of an engine that says a trace of its dataplane in the guide's terms. The engine stamps
// each hop with the stages it does (trace.Part) as its walk makes it; inspect/stages reads the stamps into the
// guide's stages and asks the engine, through this face, for the sentences: no reader re-reads an engine's rule
// text to tell what a hop was.
type Explainer interface {
	// Guide says a stage in the guide's terms: a sentence, from what the trace's parts at that stage mean.
	Guide(t Told) string
	// ChoiceRule is how the engine chooses among endpoints, the same for every path ("" when the trace does not
	// show it): the statistic cascade with each rule's chance, the numgen map, the scheduler.
	ChoiceRule(t *trace.Trace) string
	// GuideNote is one short line, under the trace table, on where the rules this trace met differ from the
	// iptables chains the guide shows ("" when nothing differs).
	GuideNote(t *trace.Trace) string
}

// The stages the guide walks, as Told names them: the hops' stages, then the source the pod sees and the reply.
const (
	TellMatch   = string(trace.StageMatch)
	TellService = string(trace.StageService)
	TellChoice  = string(trace.StageChoice)
	TellDNAT    = string(trace.StageDNAT)
	TellSNAT    = string(trace.StageSNAT)
	TellSource  = "source"
	TellReply   = "reply"
)

// Told is what an engine's sentence for a stage is said from.
type Told struct {
	Stage string // one of the Tell constants
	// Parts are the parts the stage was read from, every path's (for SNAT, the mark's too).
	Parts []trace.Part
	// Differs says the paths do different things at this stage.
	Differs bool
	Trace   *trace.Trace
}

// Means says whether a part of the stage means word.
func (t Told) Means(word string) bool {
	return slices.ContainsFunc(t.Parts, func(p trace.Part) bool { return p.Means == word })
}

// MeansAt says whether a part of the given hop stage means word.
func (t Told) MeansAt(stage trace.Stage, word string) bool {
	return slices.ContainsFunc(t.Parts, func(p trace.Part) bool { return p.Stage == stage && p.Means == word })
}

// Has says whether the stage was read from a part of the given hop stage.
func (t Told) Has(stage trace.Stage) bool {
	return slices.ContainsFunc(t.Parts, func(p trace.Part) bool { return p.Stage == stage })
}

// NotKubeProxyDNAT is the DNAT stage's sentence for a rule that is not kube-proxy's (a Docker host's published
// port, a hand-written DNAT): where it is, and that the guide's chains are not in it.
func NotKubeProxyDNAT(t Told) string {
	for _, p := range t.Parts {
		if p.Stage == trace.StageDNAT && p.At != "" {
			return "The destination is rewritten by " + p.At + ", a rule that is not one of kube-proxy's endpoint chains the guide shows."
		}
	}
	return "The destination is rewritten by a rule that is not one of kube-proxy's endpoint chains the guide shows."
}
