package app

import (
	"bytes"
	"strings"
	"testing"
)

// TestScenarioRunCouldNotRun: what keeps `scenario run` from running anything (a wrong name, flag or value, a
// dataplane none of the scenarios is for) exits 2 with one line, never 1 (a failed check) or 0.
func TestScenarioRunCouldNotRun(t *testing.T) {
	for _, args := range [][]string{
		{"nosuch"},
		{"nodeport-addresses", "--dataplane", "ebpf"},
		{"nodeport", "--dataplane", "foo"},
		{"nodeport", "--parallel", "x"},
		{"nodeport", "--bogus"},
		{"nodeport", "-o", "yaml"},
		{"testdata/no-such-file.yaml"},
	} {
		var stdout, stderr bytes.Buffer
		status := Run(append([]string{"scenario", "run"}, args...), strings.NewReader(""), &stdout, &stderr)
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		if status != 2 || len(lines) != 1 || !strings.HasPrefix(lines[0], "ERROR: ") || stdout.Len() != 0 {
			t.Errorf("scenario run %s: status %d, stderr %q, stdout %q; want 2 and one ERROR line", strings.Join(args, " "), status, stderr.String(), stdout.String())
		}
	}
}
