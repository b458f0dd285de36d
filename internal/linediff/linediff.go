// Package linediff says where two texts part, for tests that compare printed output with what they expect.
package linediff

import (
	"fmt"
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
