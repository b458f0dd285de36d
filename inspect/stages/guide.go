package stages

import (
	"fmt"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// guide says a stage in the guide's terms: the guide walks kube-proxy's iptables chains (KUBE-SERVICES,
// KUBE-NODEPORTS, KUBE-SVC, KUBE-SEP, KUBE-MARK-MASQ, KUBE-POSTROUTING); each sentence names what the trace's
// dataplane does in their place. A sentence only says what the stage's text shows.
func guide(r *reader, s Stage) string {
	g := guideSentence(r, s)
	shown := len(s.Paths) > 0 || s.Text != Unknown && s.Text != None && !strings.HasPrefix(s.Text, None+": ")
	if s.Key == Choice && shown {
		if local := r.t.EveryDelivered(func(p trace.Path) string { return p.LocalOnly }); local != "" {
			// A traffic policy of Local narrows the choice before any engine's way of making it.
			g = "Only among this node's endpoints (a traffic policy of Local, " + local + "). " + g
		}
	}
	return g
}

// guideSentence is a stage in the guide's terms: what no hop did or the trace cannot tell, said here; the
// rest, the trace's engine says from the parts the stage was read from.
func guideSentence(r *reader, s Stage) string {
	switch {
	case len(s.Paths) > 0:
	case s.Text == Unknown:
		return "The trace does not show this stage."
	case s.Text == None:
		return "Nothing is done at this stage."
	case strings.HasPrefix(s.Text, None+": "):
		return "Nothing is done at this stage: " + strings.TrimPrefix(s.Text, None+": ") + "."
	}
	if s.Key == Source {
		return "The pod sees " + strings.Join(s.All(), "; ") + "."
	}
	if r.ex == nil {
		return fmt.Sprintf("k8sguide has no guide sentences for the dataplane %q; the stage's text is what its hops did.", r.t.Dataplane)
	}
	return r.ex.Guide(dataplanes.Told{Stage: s.Key, Parts: r.parts(s), Differs: len(s.Paths) > 0, Trace: r.t})
}

// parts are the parts of the hops a stage was read from, at that stage (for SNAT, the mark's too).
func (r *reader) parts(s Stage) []trace.Part {
	var out []trace.Part
	for _, ref := range s.Hops {
		p := ref.Path
		if p == 0 {
			p = 1
		}
		if p > len(r.t.Paths) || ref.Index >= len(r.t.Paths[p-1].Hops) {
			continue
		}
		for _, part := range r.t.Paths[p-1].Hops[ref.Index].Parts {
			if string(part.Stage) == s.Key || s.Key == SNAT && part.Stage == trace.StageMark {
				out = append(out, part)
			}
		}
	}
	return out
}

// GuideNote is one short line on where the rules a trace met differ from the iptables chains the guide shows, in
// the words of the trace's engine; "" when nothing differs or k8sguide has no explanation face for it.
func GuideNote(t *trace.Trace) string {
	if x := explainer(t.Dataplane); x != nil {
		return x.GuideNote(t)
	}
	return ""
}
