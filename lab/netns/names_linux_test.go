package netns

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/state"
)

// TestNamespaceOfNames: exec takes a node by its short name (worker, as node-ip prints it), the client as
// "client", and a pod as pod/NAME; an unknown name gets a guess (GitHub issue 17). No lab runs: the lab has no
// apiserver, so no pod is found.
func TestNamespaceOfNames(t *testing.T) {
	p := &Provider{Store: state.Store{Root: t.TempDir()}}
	st := &state.Lab{Nodes: []lab.Node{{Name: "solo-control-plane"}, {Name: "solo-worker"}, {Name: "solo-worker2"}}}
	for _, tc := range []struct{ target, ns, node, err string }{
		{target: "solo-worker2", ns: "solo-worker2", node: "solo-worker2"},
		{target: "worker2", ns: "solo-worker2", node: "solo-worker2"},
		{target: "control-plane", ns: "solo-control-plane", node: "solo-control-plane"},
		{target: "solo-client", ns: "solo-client"},
		{target: "client", ns: "solo-client"},
		{target: "wroker2", err: `no node or pod named "wroker2" (did you mean "worker2"? known: [solo-control-plane solo-worker solo-worker2 solo-client])`},
		{target: "web-1", err: `no node or pod named "web-1" (known: [solo-control-plane solo-worker solo-worker2 solo-client])`},
		{target: "pod/worker2", err: `no pod named "pod/worker2"`},
		{target: "pod/default/web-1", err: `no pod named "pod/default/web-1"`},
	} {
		ns, node, err := p.namespaceOf(context.Background(), st, "solo", tc.target)
		if tc.err != "" {
			var nf *lab.NotFoundError
			if !errors.As(err, &nf) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %q, %q, %v; want %q", tc.target, ns, node, err, tc.err)
			}
			continue
		}
		if err != nil || ns != tc.ns || node != tc.node {
			t.Errorf("%s: %q, %q, %v; want %q, %q", tc.target, ns, node, err, tc.ns, tc.node)
		}
	}
}
