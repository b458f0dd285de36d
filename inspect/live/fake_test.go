package live

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/inspect/live/livetest"
	"github.com/k8sguide/k8sguide/inspect/request"
	"github.com/k8sguide/k8sguide/inspect/tracer"
	"github.com/k8sguide/k8sguide/lab"
)

// goldLab is the lab the CLI's golden iptables snapshot was taken of (a netns lab, see
// cmd/k8sguide/app/testdata/README.md), with that snapshot as its worker2.
func goldLab(t *testing.T) *livetest.Provider {
	t.Helper()
	s, err := tracer.LoadFile("../../cmd/k8sguide/app/testdata/iptables-worker2.v1.json", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := livetest.New(s.Lab, s)
	if err != nil {
		t.Fatal(err)
	}
	return livetest.NewProvider(l)
}

// TestResolve: the node rule against a lab's own names, read only when the flags name a pod or a Service.
func TestResolve(t *testing.T) {
	p := goldLab(t)
	ctx := context.Background()
	for _, c := range []struct {
		f          request.Flags
		node, dst  string
		from, fail string
	}{
		{f: request.Flags{Dst: "172.18.0.3:31758"}, node: "gold-iptables-worker", dst: "172.18.0.3:31758"},
		{f: request.Flags{Service: "web"}, node: "gold-iptables-worker2", dst: "172.18.0.4:31758"},
		{f: request.Flags{Service: "web", ClusterIP: true, From: "pod/web"}, node: "gold-iptables-worker2", dst: "10.96.99.110:80", from: "pod/web-6b4fbbd7c4-97h9q"},
		{f: request.Flags{Service: "web", From: "pod/web", Node: "worker"}, node: "gold-iptables-worker", dst: "172.18.0.3:31758", from: "pod/web-6b4fbbd7c4-frbn2"},
		{f: request.Flags{Dst: "10.96.99.110:80"}, fail: "is not a node address"},
	} {
		pk, err := Resolve(ctx, p, "gold-iptables", c.f)
		if c.fail != "" {
			if err == nil || !strings.Contains(err.Error(), c.fail) {
				t.Errorf("Resolve(%+v) = %+v, %v; want an error saying %q", c.f, pk, err, c.fail)
			}
			continue
		}
		if err != nil || pk.Node != c.node || pk.Request.Dst != c.dst || pk.From != c.from {
			t.Errorf("Resolve(%+v) = node %q dst %q from %q, %v; want %q %q %q", c.f, pk.Node, pk.Request.Dst, pk.From, err, c.node, c.dst, c.from)
		}
	}
	if _, err := Resolve(ctx, p, "nope", request.Flags{Dst: "172.18.0.3:1"}); !errors.As(err, new(*lab.NotFoundError)) {
		t.Errorf("Resolve in a lab that is not there: %v; want a NotFoundError", err)
	}
}

// TestSnapshotAndTrace: a node's snapshot is the collector's, with the lab's names added; a trace of it names the
// node and lab; a node the collector cannot read is an error naming the node.
func TestSnapshotAndTrace(t *testing.T) {
	p := goldLab(t)
	ctx := context.Background()
	s, err := Snapshot(ctx, p, "gold-iptables", "gold-iptables-worker2")
	if err != nil {
		t.Fatal(err)
	}
	if s.Kubernetes == nil || len(s.Kubernetes.Pods) != 3 || len(s.Kubernetes.Services) != 1 || s.Lab != "gold-iptables" || NamesNote(s) != "" {
		t.Errorf("snapshot of worker2: lab %q, names %+v, note %q; want the lab's 3 pods and 1 Service", s.Lab, s.Kubernetes, NamesNote(s))
	}
	tr, _, err := Trace(ctx, p, "gold-iptables", "gold-iptables-worker2", tracer.Request{Dst: "172.18.0.4:31758"})
	if err != nil || tr.Node != "gold-iptables-worker2" || tr.Verdict != "delivered" || len(tr.Endpoints) != 3 {
		t.Errorf("trace of web's NodePort on worker2: %+v, %v; want delivered to 3 endpoints", tr, err)
	}
	if _, err := Snapshot(ctx, p, "gold-iptables", "gold-iptables-worker"); err == nil || !strings.HasPrefix(err.Error(), "collecting gold-iptables-worker: ") {
		t.Errorf("snapshot of a node the collector cannot read: %v; want an error naming it", err)
	}
	if _, err := Snapshot(ctx, p, "gold-iptables", "worker9"); !errors.As(err, new(*lab.NotFoundError)) {
		t.Errorf("snapshot of a node the lab lacks: %v; want a NotFoundError", err)
	}
}

// noNames is a lab whose apiserver does not answer.
type noNames struct{ *livetest.Provider }

func (noNames) Workloads(context.Context, string) (lab.Workloads, error) {
	return nil, errors.New("connection refused")
}

// TestSnapshotWithoutNames: the rules are the kernel's and need no apiserver; the snapshot says why the names
// are missing, and the trace of it still walks.
func TestSnapshotWithoutNames(t *testing.T) {
	p := noNames{goldLab(t)}
	s, err := Snapshot(context.Background(), p, "gold-iptables", "gold-iptables-worker2")
	if err != nil {
		t.Fatal(err)
	}
	if s.Kubernetes != nil || NamesNote(s) != "pods and Services are shown by address: connection refused" {
		t.Errorf("names %+v, note %q; want none, and the note saying why", s.Kubernetes, NamesNote(s))
	}
	if tr, err := tracer.Trace(s, tracer.Request{Dst: "172.18.0.4:31758"}); err != nil || len(tr.Endpoints) != 3 {
		t.Errorf("trace without names: %+v, %v; want the 3 endpoints, by address", tr, err)
	}
	if _, err := Resolve(context.Background(), p, "gold-iptables", request.Flags{Service: "web"}); err == nil || err.Error() != "connection refused" {
		t.Errorf("--service without an apiserver: %v; want the apiserver's error", err)
	}
}
