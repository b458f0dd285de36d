package tracer

import (
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// TestLeavesForAnotherNode: a pod's packet to another node's NodePort is not this node's to answer. Snapshots
// from a real kind lab (testdata/kind, `k8sguide snapshot` of kx-worker2 and kx-worker, iptables mode, web's
// 3 pods on kx-worker2, NodePort 30743): on the pod's node the packet is only masqueraded by the pod network's
// KIND-MASQ-AGENT and leaves for kx-worker, whose kube-proxy DNATs it and masquerades it again. `trace --verify`
// saw the pod answer 172.18.0.3 (kx-worker); before, the trace said the pod sees 172.18.0.2 and disagreed.
func TestLeavesForAnotherNode(t *testing.T) {
	from, err := LoadFile("testdata/kind/iptables-worker2.json", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := Trace(from, Request{Dst: "172.18.0.3:30743", From: "pod/web-85bffcdccf-dz729"})
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Paths) != 1 {
		t.Fatalf("paths = %d, want 1", len(tr.Paths))
	}
	p := tr.Paths[0]
	if p.Verdict != trace.Delivered || p.NextNode != "kx-worker" || p.SNAT != "" || p.Reply != nil || p.Endpoint != nil {
		t.Errorf("path = verdict %s, next node %q, SNAT %q, reply %v, endpoint %v; want delivered to kx-worker, no SNAT, reply or endpoint claimed",
			p.Verdict, p.NextNode, p.SNAT, p.Reply, p.Endpoint)
	}
	want := "walk on with --node kx-worker --src 172.18.0.2"
	if !strings.Contains(strings.Join(tr.Notes, "\n"), want) {
		t.Errorf("notes %q lack %q", tr.Notes, want)
	}

	// Walked on, as the note says: the other node's rules give what the kernel showed.
	on, err := LoadFile("testdata/kind/iptables-worker.json", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr, err = Trace(on, Request{Dst: "172.18.0.3:30743", Src: "172.18.0.2"})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Verdict != trace.Delivered || len(tr.Paths) != 3 {
		t.Fatalf("on kx-worker: verdict %s, %d paths; want delivered to 3 endpoints", tr.Verdict, len(tr.Paths))
	}
	for _, p := range tr.Paths {
		if p.NextNode != "" || p.SNAT != "172.18.0.3" {
			t.Errorf("on kx-worker, path to %v: next node %q, SNAT %q; want an endpoint that sees 172.18.0.3", p.Endpoint, p.NextNode, p.SNAT)
		}
	}

	// A packet to this node's own NodePort stays this node's answer.
	tr, err = Trace(from, Request{Dst: "172.18.0.2:30743", From: "pod/web-85bffcdccf-dz729"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range tr.Paths {
		if p.NextNode != "" {
			t.Errorf("own NodePort: path names next node %q", p.NextNode)
		}
	}
}
