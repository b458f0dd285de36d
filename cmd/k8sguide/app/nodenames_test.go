package app

import (
	"strings"
	"testing"
)

// TestNodeShortNames: a node is named as node-ip prints it (worker, control-plane) wherever a command takes a node,
// and a name that is no node's gets a guess and the list (GitHub issue 17). The lab is solo, alone, so no --name.
func TestNodeShortNames(t *testing.T) {
	fakeLabs(t, "solo")
	for _, tc := range []struct {
		args    []string
		out     string
		errPart string
	}{
		{args: []string{"node-ip", "worker"}, out: "worker:172.18.0.3\n"},
		{args: []string{"node-ip", "solo-worker"}, out: "worker:172.18.0.3\n"},
		{args: []string{"node-ip", "1"}, out: "control-plane:172.18.0.2\n"},
		{args: []string{"node-ip", "wroker"}, errPart: `no node named "wroker" (did you mean "worker"? known: [solo-control-plane solo-worker])`},
		{args: []string{"snapshot", "--node", "wroker"}, errPart: `no node named "wroker" (did you mean "worker"?`},
		{args: []string{"connect", "10.96.0.1:80", "--from", "node", "--node", "contrl-plane"}, errPart: `(did you mean "control-plane"?`},
		{args: []string{"exec", "wroker", "--", "true"}, errPart: `no node or pod named "wroker" (did you mean "worker"? known: [solo-control-plane solo-worker solo-client])`},
		// exec takes a pod as trace --from does; this lab has none.
		{args: []string{"exec", "pod/web-1", "--", "true"}, errPart: `no pod named "pod/web-1"`},
	} {
		status, out, errOut := run(tc.args...)
		if tc.errPart == "" {
			if status != 0 || out != tc.out {
				t.Errorf("%v: status %d, stdout %q, stderr %q; want %q", tc.args, status, out, errOut, tc.out)
			}
			continue
		}
		if status != 1 || !strings.Contains(errOut, tc.errPart) {
			t.Errorf("%v: status %d, stderr %q; want %q", tc.args, status, errOut, tc.errPart)
		}
	}
}
