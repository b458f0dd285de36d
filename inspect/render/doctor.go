package render

import (
	"fmt"
	"io"
	"strings"

	"github.com/k8sguide/k8sguide/lab/doctor"
)

// doctorMarks are what a check's line starts with: the verdict at a glance, and a word for a screen reader or a
// terminal without the glyphs.
var doctorMarks = map[doctor.Status]string{doctor.Pass: "✓ ok  ", doctor.Warn: "! warn", doctor.Fail: "✗ FAIL"}

// WriteDoctor prints a doctor report within width columns: the checks under what needs them, each as its
// verdict, its name and what was found, and under a warn or a fail the fix; then a summary line.
func WriteDoctor(w io.Writer, width int, r doctor.Report) error {
	nameWidth := 0
	for _, c := range r.Checks {
		nameWidth = max(nameWidth, TextWidth(c.Name))
	}
	nameWidth = min(nameWidth, 24)
	var b strings.Builder
	group := ""
	counts := map[doctor.Status]int{}
	for _, c := range r.Checks {
		counts[c.Status]++
		if c.For != group {
			if group != "" {
				b.WriteString("\n")
			}
			group = c.For
			b.WriteString(c.For + "\n")
		}
		name := ShortenMiddle(c.Name, nameWidth)
		first := fmt.Sprintf("  %s  %s%s  ", doctorMarks[c.Status], name, strings.Repeat(" ", nameWidth-TextWidth(name)))
		indent := strings.Repeat(" ", TextWidth(first))
		b.WriteString(Wrap(first, indent, c.Found, width))
		if c.Fix != "" && c.Status != doctor.Pass {
			b.WriteString(Wrap(indent+"fix:", indent+"     ", c.Fix, width))
		}
	}
	b.WriteString("\n")
	switch {
	case counts[doctor.Fail] > 0 && counts[doctor.Warn] > 0:
		fmt.Fprintf(&b, "%d of %d checks failed, %d with a warning.\n", counts[doctor.Fail], len(r.Checks), counts[doctor.Warn])
	case counts[doctor.Fail] > 0:
		fmt.Fprintf(&b, "%d of %d checks failed.\n", counts[doctor.Fail], len(r.Checks))
	case counts[doctor.Warn] > 0:
		fmt.Fprintf(&b, "No check failed; %d of %d with a warning.\n", counts[doctor.Warn], len(r.Checks))
	default:
		fmt.Fprintf(&b, "All %d checks passed.\n", len(r.Checks))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
