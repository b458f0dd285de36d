package render

import (
	"fmt"
	"io"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/stages"
)

// GuideNote is one short note, for the trace table, on where the rules this trace met differ from the older ones
// the guide shows, in the words of the trace's engine (its explanation face); "" when nothing differs.
func GuideNote(t *trace.Trace) string { return stages.GuideNote(t) }

// Explain prints a sentence per stage in the guide's terms, under a heading, fitted to width.
func Explain(w io.Writer, width int, ss []stages.Stage) {
	if width <= 0 {
		width = DefaultWidth
	}
	fmt.Fprintln(w, "\nIn the guide's terms:")
	for _, s := range ss {
		io.WriteString(w, Wrap("  "+s.Title+":", "    ", s.Guide, width))
	}
}
