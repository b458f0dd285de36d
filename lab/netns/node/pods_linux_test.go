package node

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// TestReadyStatusOutlastsFailedWrites: an apiserver that fails every write of a pod's status for a while (more
// tries than writeStatus makes) must not leave the pod NotReady once it answers again. The watch loop used to
// take the pod as ready before the write went through, and never wrote it again (a rollout then waited for a
// pod that served all along: about one lab in 40).
func TestReadyStatusOutlastsFailedWrites(t *testing.T) {
	saved := statusBackoff
	statusBackoff = wait.Backoff{Duration: time.Millisecond, Steps: 3}
	t.Cleanup(func() { statusBackoff = saved })

	// The pod's server: a listener on loopback (the pod has no readiness probe: ready once it listens).
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := netip.MustParseAddrPort(l.Addr().String())
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "default", UID: "uid-1"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "web", Ports: []v1.ContainerPort{{ContainerPort: int32(addr.Port())}}}}},
	}
	client := fake.NewClientset(pod)
	var failures atomic.Int32
	failures.Store(7) // two writeStatus calls' worth and one more
	client.PrependReactor("update", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" && failures.Add(-1) >= 0 {
			return true, nil, errors.New("etcdserver: request timed out")
		}
		return false, nil, nil
	})
	r := &podRunner{client: client, recorder: record.NewFakeRecorder(10), logger: klog.Background()}
	w := &podWorker{r: r, uid: pod.UID, pod: pod, ip: addr.Addr(), updates: make(chan *v1.Pod, 1), logger: klog.Background()}

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.watch(ctx, make(chan int), 0, time.Now(), v1.ContainerState{Running: &v1.ContainerStateRunning{}})
	}()
	defer func() { cancel(); <-done }()
	for {
		got, err := client.CoreV1().Pods("default").Get(ctx, "web-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range got.Status.Conditions {
			if c.Type == v1.PodReady && c.Status == v1.ConditionTrue {
				if n := failures.Load(); n >= 0 {
					t.Fatalf("ready with %d failures still to come", n+1)
				}
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the pod never became ready in the API (%d failed writes left)", max(failures.Load(), 0))
		case <-time.After(50 * time.Millisecond):
		}
	}
}
