package live

import (
	"testing"

	"github.com/k8sguide/k8sguide/lab"
)

// TestDstNode: the node whose address a packet is sent to is the node whose rules it meets, for trace and
// compare alike; a ClusterIP, an outside address or no --dst yet is no node's.
func TestDstNode(t *testing.T) {
	st := lab.Status{Nodes: []lab.Node{
		{Name: "l-control-plane", IP: "172.18.0.2"}, {Name: "l-worker", IP: "172.18.0.3"}, {Name: "l-worker2", IP: "172.18.0.4"},
	}}
	for dst, want := range map[string]string{
		"172.18.0.3:31103": "l-worker",
		"172.18.0.4:80":    "l-worker2",
		"10.96.0.10:80":    "",
		"172.18.0.1:80":    "",
		"":                 "",
		"172.18.0.3":       "",
	} {
		got, ok := DstNode(st, dst)
		if got != want || ok != (want != "") {
			t.Errorf("DstNode(%q) = %q, %v; want %q", dst, got, ok, want)
		}
	}
}
