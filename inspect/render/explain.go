package render

import (
	"fmt"
	"io"

	"github.com/k8sguide/k8sguide/inspect/stages"
)

// Explain prints a sentence per stage in the guide's terms, under a heading, fitted to width.
func Explain(w io.Writer, width int, ss []stages.Stage) {
	if width <= 0 {
		width = DefaultWidth
	}
	ss = *visible(&ss) // the stages' sentences quote the input's rules and names
	fmt.Fprintln(w, "\nIn the guide's terms:")
	for _, s := range ss {
		io.WriteString(w, Wrap("  "+s.Title+":", "    ", s.Guide, width))
	}
}
