// Package linediff says where two texts part, for tests that compare printed output with what they expect, and
// which lines two sets of lines do not share.
package linediff

import (
	"fmt"
	"slices"
	"strings"
)

// First names the first line where want and got part, with both lines quoted.
func First(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range max(len(w), len(g)) {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\n  want: %q\n  got:  %q", i+1, wl, gl)
		}
	}
	return "(same lines, different bytes)"
}

// Sets says which lines only one of before and after holds, order aside: "  - LINE" for each line before has and
// after lacks, then "  + LINE" for each after has and before lacks, one a line ("" when they hold the same).
func Sets(before, after []string) string {
	var b strings.Builder
	for _, l := range before {
		if !slices.Contains(after, l) {
			b.WriteString("  - " + l + "\n")
		}
	}
	for _, l := range after {
		if !slices.Contains(before, l) {
			b.WriteString("  + " + l + "\n")
		}
	}
	return strings.TrimRight(b.String(), "\n")
}
