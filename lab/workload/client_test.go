package workload

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/scenarios"
)

// TestWorkloads applies the web scenario to a fake apiserver: server-side apply of each object, a wait for the
// rollout that a fake controller completes, Expose as kubectl expose, and a pod that cannot pull its image.
func TestWorkloads(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	w := &workloads{cs: cs, rollout: 5 * time.Second, poll: 5 * time.Millisecond}
	m, err := ParseManifest(scenarios.Web)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.ConfigMaps) != 1 || len(m.Deployments) != 1 {
		t.Fatalf("web scenario: %d configmaps, %d deployments", len(m.ConfigMaps), len(m.Deployments))
	}
	stop := make(chan struct{})
	defer close(stop)
	go fakeDeploymentController(cs, stop)
	if err := w.Apply(ctx, m.ConfigMaps, m.Deployments, m.Services, nil); err != nil {
		t.Fatal(err)
	}
	cm, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "web-nginx", metav1.GetOptions{})
	if err != nil || !strings.Contains(cm.Data["default.conf"], "X-K8sguide-Pod $hostname") {
		t.Fatalf("configmap: %v %v", cm, err)
	}
	d, err := cs.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil || *d.Spec.Replicas != 3 || d.Spec.Template.Spec.Containers[0].Image != "nginx:1.22.1" {
		t.Fatalf("deployment: %v", err)
	}
	// Applying again is an update, not an error.
	if err := w.Apply(ctx, m.ConfigMaps, m.Deployments, nil, nil); err != nil {
		t.Fatal(err)
	}
	svc, created, err := w.Expose(ctx, lab.ExposeOptions{Deployment: "web", Port: 80})
	if err != nil || !created {
		t.Fatal(created, err)
	}
	if svc.Name != "web" || svc.Spec.Type != v1.ServiceTypeNodePort || svc.Spec.Selector["app"] != "web" || svc.Spec.Ports[0].TargetPort.IntVal != 80 {
		t.Fatalf("service %+v", svc.Spec)
	}
	if _, _, err := w.Expose(ctx, lab.ExposeOptions{Deployment: "nope", Port: 80}); err == nil {
		t.Fatal("exposed a missing deployment")
	}
	// Again, as after the guide's `make nodeport`: the same exposure is used as it is; another one is refused,
	// saying how it differs.
	if again, created, err := w.Expose(ctx, lab.ExposeOptions{Deployment: "web", Port: 80}); err != nil || created || again.UID != svc.UID {
		t.Fatalf("exposing web again: created %v, %v", created, err)
	}
	if _, _, err := w.Expose(ctx, lab.ExposeOptions{Deployment: "web", Port: 8080}); err == nil || !strings.Contains(err.Error(), "port 80:") {
		t.Fatalf("exposing web again on another port: %v", err)
	}
	if _, _, err := w.Expose(ctx, lab.ExposeOptions{Deployment: "web", Port: 80, ExternalTrafficPolicy: v1.ServiceExternalTrafficPolicyLocal}); err == nil || !strings.Contains(err.Error(), "externalTrafficPolicy") {
		t.Fatalf("exposing web again with another policy: %v", err)
	}
	if err := w.Scale(ctx, "default", "web", 1); err != nil {
		t.Fatal(err)
	}
	if d, _ := cs.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{}); *d.Spec.Replicas != 1 {
		t.Fatalf("scaled to %d", *d.Spec.Replicas)
	}

	// A pod that cannot pull ends the wait at once, naming the pod and the image.
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-abc", Namespace: "default", Labels: map[string]string{"app": "web"}},
		Status: v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{{Name: "nginx", Image: "nginx:nope",
			State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image \"nginx:nope\""}}}}},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bad := m.Deployments[0].DeepCopy()
	bad.Spec.Template.Spec.Containers[0].Image = "nginx:nope"
	err = (&workloads{cs: cs, rollout: 5 * time.Second, poll: 5 * time.Millisecond}).waitRollout(ctx, "default", "web-stuck")
	if err == nil {
		t.Fatal("waited for a missing deployment")
	}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, func() *appsv1.Deployment { b := bad.DeepCopy(); b.Name = "web-stuck"; return b }(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = w.waitRollout(ctx, "default", "web-stuck")
	if err == nil || !strings.Contains(err.Error(), "cannot pull image nginx:nope (ImagePullBackOff)") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("image pull failure: %v", err)
	}
}

// fakeDeploymentController does what the Deployment controller would for the test: marks every Deployment
// named web as fully rolled out.
func fakeDeploymentController(cs *fake.Clientset, stop chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(2 * time.Millisecond):
		}
		l, err := cs.AppsV1().Deployments("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			continue
		}
		for _, d := range l.Items {
			if d.Name != "web" {
				continue
			}
			r := *d.Spec.Replicas
			if d.Status.ObservedGeneration >= d.Generation && d.Status.AvailableReplicas == r && d.Status.Replicas == r {
				continue
			}
			d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: r, UpdatedReplicas: r, ReadyReplicas: r, AvailableReplicas: r}
			cs.AppsV1().Deployments("default").UpdateStatus(context.Background(), &d, metav1.UpdateOptions{})
		}
	}
}

// TestApplyAllOrNothing: a manifest whose third object the apiserver refuses changes nothing (every object is
// sent as a dry run first; a manifest applied in part without a word was a campaign's finding), and an apply
// that stops part-way after its dry run passed says what it applied.
func TestApplyAllOrNothing(t *testing.T) {
	ctx := context.Background()
	m, err := ParseManifest([]byte(`
apiVersion: v1
kind: ConfigMap
metadata: {name: one}
---
apiVersion: v1
kind: Service
metadata: {name: two}
spec: {ports: [{port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: three}
spec: {ports: [{port: 80}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name         string
		refuseDryRun bool
		wantApplied  int
		want         string
	}{
		{"refused by the dry run", true, 0, "nothing applied: the apiserver refuses service/three: refused"},
		{"refused when applied", false, 2, "applied 2 of 3 objects (configmap/one, service/two), then: service/three: refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset()
			applied := 0
			cs.PrependReactor("patch", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
				pa := a.(k8stesting.PatchActionImpl)
				dry := len(pa.GetPatchOptions().DryRun) > 0
				if pa.GetName() == "three" && (dry == tc.refuseDryRun) {
					return true, nil, errors.New("refused")
				}
				if !dry {
					applied++
				}
				if a.GetResource().Resource == "configmaps" {
					return true, &v1.ConfigMap{}, nil
				}
				return true, &v1.Service{}, nil
			})
			w := &workloads{cs: cs, rollout: time.Second, poll: time.Millisecond}
			err := w.Apply(ctx, m.ConfigMaps, m.Deployments, m.Services, nil)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if applied != tc.wantApplied {
				t.Errorf("%d objects applied for real, want %d", applied, tc.wantApplied)
			}
			var partial *PartialError
			if errors.As(err, &partial) != (tc.wantApplied > 0) {
				t.Errorf("PartialError: %v", err)
			}
		})
	}
}

// TestApplyRetries: an apply the apiserver could not take for a moment (503, a reset connection) is sent
// again and goes through; one it refuses is not retried; a deploy of thousands says how far it got.
func TestApplyRetries(t *testing.T) {
	saved := applyBackoff
	applyBackoff = wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 4}
	t.Cleanup(func() { applyBackoff = saved })
	m, err := ParseManifest([]byte("apiVersion: v1\nkind: Service\nmetadata: {name: one}\nspec: {ports: [{port: 80}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		failures []error
		wantErr  bool
		calls    int
	}{
		{"unavailable, then taken", []error{apierrors.NewServiceUnavailable("restarting")}, false, 3},
		{"a reset connection, then taken", []error{syscall.ECONNRESET}, false, 3},
		{"refused: not retried", []error{apierrors.NewBadRequest("no")}, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset()
			calls := 0
			cs.PrependReactor("patch", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
				calls++
				if calls <= len(tc.failures) {
					return true, nil, tc.failures[calls-1]
				}
				return true, &v1.Service{}, nil
			})
			w := &workloads{cs: cs, rollout: time.Second, poll: time.Millisecond}
			err := w.Apply(context.Background(), nil, nil, m.Services, nil)
			if (err != nil) != tc.wantErr || calls != tc.calls {
				t.Fatalf("error %v after %d patches; want error %v after %d (dry run and apply)", err, calls, tc.wantErr, tc.calls)
			}
		})
	}
	var progress strings.Builder
	count := counter(&progress, 2500, "applied")
	for n := 1; n <= 2500; n++ {
		count(n)
	}
	if want := "1000 of 2500 objects applied\n2000 of 2500 objects applied\n2500 of 2500 objects applied\n"; progress.String() != want {
		t.Errorf("progress %q, want %q", progress.String(), want)
	}
}

// TestRolloutEndsOnADownNode: a pod placed on a node that is down for good ends the wait at once, naming the node
// and why; the same pod on a node that is well is waited for until the timeout.
func TestRolloutEndsOnADownNode(t *testing.T) {
	ctx := context.Background()
	replicas := int32(2)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		},
		Status: appsv1.DeploymentStatus{Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 1},
	}
	pod := func(name, node string, ready v1.ConditionStatus) *v1.Pod {
		return &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": "web"}},
			Spec:       v1.PodSpec{NodeName: node},
			Status:     v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: ready}}},
		}
	}
	down := func() map[string]string { return map[string]string{"w2": "its init (pid 7) is gone"} }
	for _, tc := range []struct {
		node    string
		wantErr bool
	}{{"w2", true}, {"w1", false}} {
		cs := fake.NewClientset(d, pod("web-a", "w1", v1.ConditionTrue), pod("web-b", tc.node, v1.ConditionFalse))
		w := ClientOfLab(cs, 300*time.Millisecond, 5*time.Millisecond, down).(*workloads)
		err := w.waitRollout(ctx, "default", "web")
		var onDown *PodOnDownNodeError
		switch {
		case tc.wantErr && (!errors.As(err, &onDown) || onDown.Pod != "web-b" || onDown.Node != "w2" || !strings.Contains(err.Error(), "its init (pid 7) is gone")):
			t.Errorf("pod on the down node: %v", err)
		case !tc.wantErr && (err == nil || errors.As(err, &onDown) || !strings.Contains(err.Error(), "1 of 2 replicas ready")):
			t.Errorf("pod on a node that is well: %v, want the timeout", err)
		}
	}
}
