package workload

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/k8sguide/k8sguide/lab"
)

// FieldManager is k8sguide's name in server-side apply.
const FieldManager = "k8sguide"

// workloads are a lab's objects, through its apiserver.
type workloads struct {
	cs kubernetes.Interface
	// rollout is how long Apply and Scale wait for a Deployment's pods.
	rollout time.Duration
	poll    time.Duration
}

// Client gives a lab's objects through client-go. rollout bounds the wait for a Deployment's pods (minutes on
// kind, where images are pulled); poll is how often the wait looks.
func Client(cs kubernetes.Interface, rollout, poll time.Duration) lab.Workloads {
	return &workloads{cs: cs, rollout: rollout, poll: poll}
}

// Apply applies each object server-side, as `kubectl apply --server-side` does, then waits for the
// Deployments' pods: the command returns when the pods serve.
func (w *workloads) Apply(ctx context.Context, configMaps []*v1.ConfigMap, deployments []*appsv1.Deployment, services []*v1.Service) error {
	for _, c := range configMaps {
		c = c.DeepCopy()
		c.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}
		if err := apply(ctx, "configmap", c.Name, c, w.cs.CoreV1().ConfigMaps(c.Namespace).Patch); err != nil {
			return err
		}
	}
	for _, d := range deployments {
		d = d.DeepCopy()
		d.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
		if err := apply(ctx, "deployment.apps", d.Name, d, w.cs.AppsV1().Deployments(d.Namespace).Patch); err != nil {
			return err
		}
	}
	// Services go a few at a time: one apply at a time, a file of 1,000 Services spent most of its deploy
	// waiting on round trips. The first error stops the rest.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(applyParallelism)
	for _, s := range services {
		s = s.DeepCopy()
		s.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}
		if s.Namespace == "" {
			s.Namespace = metav1.NamespaceDefault
		}
		g.Go(func() error {
			return apply(gctx, "service", s.Name, s, w.cs.CoreV1().Services(s.Namespace).Patch)
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for _, d := range deployments {
		if err := w.waitRollout(ctx, d.Namespace, d.Name); err != nil {
			return err
		}
	}
	return nil
}

// applyParallelism is how many Service applies are in flight at once.
const applyParallelism = 8

// patchFunc is a typed client's Patch.
type patchFunc[T any] func(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)

// apply sends obj (with its TypeMeta set) as a server-side apply patch.
func apply[T any](ctx context.Context, what, name string, obj any, patch patchFunc[T]) error {
	data, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	if _, err := patch(ctx, name, types.ApplyPatchType, data, applyOptions()); err != nil {
		return fmt.Errorf("%s/%s: %w", what, name, err)
	}
	return nil
}

func applyOptions() metav1.PatchOptions {
	return metav1.PatchOptions{FieldManager: FieldManager, Force: ptr.To(true)}
}

// Scale sets a Deployment's replicas and waits for them.
func (w *workloads) Scale(ctx context.Context, namespace, name string, replicas int32) error {
	if replicas < 0 {
		return fmt.Errorf("--replicas %d: must be 0 or more", replicas)
	}
	patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas)
	if _, err := w.cs.AppsV1().Deployments(namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
		return err
	}
	return w.waitRollout(ctx, namespace, name)
}

// Expose creates the NodePort Service `kubectl expose` would; the apiserver allocates its ClusterIP and NodePort.
func (w *workloads) Expose(ctx context.Context, opts lab.ExposeOptions) (*v1.Service, error) {
	opts, err := ExposeDefaults(opts)
	if err != nil {
		return nil, err
	}
	d, err := w.cs.AppsV1().Deployments(opts.Namespace).Get(ctx, opts.Deployment, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return w.cs.CoreV1().Services(opts.Namespace).Create(ctx, ExposeService(d, opts), metav1.CreateOptions{FieldManager: FieldManager})
}

// waitRollout waits until every replica of the Deployment's current template is ready and no old one is left,
// as `kubectl rollout status` does. A pod that cannot pull its image ends the wait at once, saying so.
func (w *workloads) waitRollout(ctx context.Context, namespace, name string) error {
	deadline := time.Now().Add(w.rollout)
	for {
		d, err := w.cs.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		want := ptr.Deref(d.Spec.Replicas, 1)
		s := d.Status
		if s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.Replicas == want && s.AvailableReplicas == want {
			return nil
		}
		if msg, err := w.podTrouble(ctx, d); err != nil {
			return err
		} else if msg != "" {
			return fmt.Errorf("deployment %s: %s", name, msg)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("deployment %s: %d of %d replicas ready after %v%s", name, s.AvailableReplicas, want, w.rollout, w.notReady(ctx, d))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(w.poll):
		}
	}
}

// notReady says, for a rollout that timed out, where each pod of d that is not ready stands: its node, phase and
// the kubelet's last word on its readiness (": not ready: web-… on NODE: Running, ContainersNotReady …").
func (w *workloads) notReady(ctx context.Context, d *appsv1.Deployment) string {
	pods, err := w.podsOf(ctx, d)
	if err != nil {
		return ""
	}
	var out []string
	for _, p := range pods {
		ready := false
		why := string(p.Status.Phase)
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodReady {
				ready = c.Status == v1.ConditionTrue
				if c.Reason != "" || c.Message != "" {
					why += ", " + strings.TrimSpace(c.Reason+" "+c.Message)
				}
			}
			if c.Type == v1.PodScheduled && c.Status != v1.ConditionTrue {
				why += ", unscheduled: " + c.Message
			}
		}
		if ready || p.DeletionTimestamp != nil {
			continue
		}
		node := p.Spec.NodeName
		if node == "" {
			node = "no node"
		}
		out = append(out, fmt.Sprintf("%s on %s: %s", p.Name, node, why))
	}
	if len(out) == 0 {
		return ""
	}
	return "; not ready: " + strings.Join(out, "; ")
}

// podsOf lists the pods d's selector selects.
func (w *workloads) podsOf(ctx context.Context, d *appsv1.Deployment) ([]v1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil, err
	}
	pods, err := w.cs.CoreV1().Pods(d.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, err
	}
	return pods.Items, nil
}

// podTrouble names the first pod of d that cannot start for a reason waiting will not fix.
func (w *workloads) podTrouble(ctx context.Context, d *appsv1.Deployment) (string, error) {
	pods, err := w.podsOf(ctx, d)
	if err != nil {
		return "", err
	}
	for _, pod := range pods {
		for _, c := range pod.Status.ContainerStatuses {
			if c.State.Waiting == nil {
				continue
			}
			switch reason := c.State.Waiting.Reason; reason {
			case "ErrImagePull", "ImagePullBackOff", "InvalidImageName":
				return fmt.Sprintf("pod %s cannot pull image %s (%s): %s", pod.Name, c.Image, reason, lab.FirstLine(c.State.Waiting.Message)), nil
			case "CreateContainerConfigError", "CrashLoopBackOff":
				return fmt.Sprintf("pod %s: %s: %s", pod.Name, reason, lab.FirstLine(c.State.Waiting.Message)), nil
			}
		}
	}
	return "", nil
}

func (w *workloads) Deployments(ctx context.Context) ([]appsv1.Deployment, error) {
	l, err := w.cs.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

func (w *workloads) Pods(ctx context.Context) ([]v1.Pod, error) {
	l, err := w.cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

func (w *workloads) Services(ctx context.Context) ([]v1.Service, error) {
	l, err := w.cs.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

func (w *workloads) EndpointSlices(ctx context.Context) ([]discoveryv1.EndpointSlice, error) {
	l, err := w.cs.DiscoveryV1().EndpointSlices(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}
