package kind

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"

	"github.com/k8sguide/k8sguide/lab"
)

// TestExecNames: exec takes a node by its short name (worker, as node-ip prints it), the client as "client", and
// a pod as pod/NAME or pod/NAMESPACE/NAME; an unknown name gets a guess (GitHub issue 17).
func TestExecNames(t *testing.T) {
	ctx := context.Background()
	p, rt, cs := fakeProvider(t)
	rt.Create("lab1", &v1alpha4.Cluster{Nodes: []v1alpha4.Node{{Role: v1alpha4.ControlPlaneRole}, {Role: v1alpha4.WorkerRole}}}, "", false, 0)
	worker := rt.clusters["lab1"][1]
	worker.pids = map[string]string{"c0ffee": "4242"}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "default"}, Spec: v1.PodSpec{NodeName: "lab1-worker"}}
	pod.Status.ContainerStatuses = []v1.ContainerStatus{{ContainerID: "containerd://c0ffee", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ target, out, err string }{
		{target: "worker", out: "ran echo hi\n"},
		{target: "control-plane", out: "ran echo hi\n"},
		{target: "client", out: "hi\n"},
		{target: "pod/web-1", out: "ran nsenter --net=/proc/4242/ns/net -- echo hi\n"},
		{target: "pod/default/web-1", out: "ran nsenter --net=/proc/4242/ns/net -- echo hi\n"},
		{target: "pod/kube-system/web-1", err: `no pod named "pod/kube-system/web-1"`},
		{target: "pod/worker", err: `no pod named "pod/worker"`},
		{target: "wroker", err: `no node or pod named "wroker" (did you mean "worker"? known: [lab1-control-plane lab1-worker lab1-client])`},
	} {
		var out bytes.Buffer
		err := p.Exec(ctx, "lab1", tc.target, []string{"echo", "hi"}, lab.Streams{Out: &out})
		if tc.err != "" {
			var nf *lab.NotFoundError
			if !errors.As(err, &nf) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v; want %q", tc.target, err, tc.err)
			}
			continue
		}
		if err != nil || out.String() != tc.out {
			t.Errorf("%s: %q, %v; want %q", tc.target, out.String(), err, tc.out)
		}
	}
}
