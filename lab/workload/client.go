package workload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	podutil "k8s.io/kubectl/pkg/util/podutils"
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
	// downForGood, when set, names the lab's nodes that will start no pod again, and why.
	downForGood func() map[string]string
}

// Client gives a lab's objects through client-go. rollout bounds the wait for a Deployment's pods (minutes on
// kind, where images are pulled); poll is how often the wait looks.
func Client(cs kubernetes.Interface, rollout, poll time.Duration) lab.Workloads {
	return &workloads{cs: cs, rollout: rollout, poll: poll}
}

// ClientOfLab is Client for a lab that knows which of its nodes are down for good (downForGood: each, with
// why): a rollout with a pod placed on one ends at once with a *PodOnDownNodeError instead of at its timeout.
// The scheduler places pods on such a node until the node controller sees it NotReady, 40 s later.
func ClientOfLab(cs kubernetes.Interface, rollout, poll time.Duration, downForGood func() map[string]string) lab.Workloads {
	return &workloads{cs: cs, rollout: rollout, poll: poll, downForGood: downForGood}
}

// PodOnDownNodeError is a rollout that cannot finish: a pod of it waits on a node that is down for good. The
// change itself was made.
type PodOnDownNodeError struct {
	Deployment, Pod, Node, Why string
}

func (e *PodOnDownNodeError) Error() string {
	return fmt.Sprintf("deployment %s: pod %s waits on node %s, which is down: %s", e.Deployment, e.Pod, e.Node, e.Why)
}

// downNodeEvery is how often a rollout's wait asks which nodes are down for good.
const downNodeEvery = time.Second

// Apply applies each object server-side, as `kubectl apply --server-side` does, then waits for the
// Deployments' pods: the command returns when the pods serve. Every object is first sent as a dry run, so that
// a manifest the apiserver refuses in part changes nothing; an apply that still stops part-way (the apiserver
// went away, Ctrl-C) fails with a *PartialError that lists what it did apply.
func (w *workloads) Apply(ctx context.Context, configMaps []*v1.ConfigMap, deployments []*appsv1.Deployment, services []*v1.Service, progress io.Writer) error {
	var serial, parallel []applyItem
	for _, c := range configMaps {
		c = c.DeepCopy()
		c.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}
		serial = append(serial, item("configmap", c.Name, c, w.cs.CoreV1().ConfigMaps(c.Namespace).Patch))
	}
	for _, d := range deployments {
		d = d.DeepCopy()
		d.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
		serial = append(serial, item("deployment.apps", d.Name, d, w.cs.AppsV1().Deployments(d.Namespace).Patch))
	}
	for _, s := range services {
		s = s.DeepCopy()
		s.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}
		if s.Namespace == "" {
			s.Namespace = metav1.NamespaceDefault
		}
		parallel = append(parallel, item("service", s.Name, s, w.cs.CoreV1().Services(s.Namespace).Patch))
	}
	total := len(serial) + len(parallel)
	if _, err := applyAll(ctx, serial, parallel, true, counter(progress, total, "accepted by the apiserver's dry run")); err != nil {
		return fmt.Errorf("nothing applied: the apiserver refuses %w", err)
	}
	if applied, err := applyAll(ctx, serial, parallel, false, counter(progress, total, "applied")); err != nil {
		if len(applied) == 0 {
			return fmt.Errorf("nothing applied: %w", err)
		}
		return &PartialError{Applied: applied, Total: total, Err: err}
	}
	for _, d := range deployments {
		if err := w.waitRollout(ctx, d.Namespace, d.Name); err != nil {
			return err
		}
	}
	return nil
}

// PartialError is an Apply that stopped part-way: the objects it applied before Err, of Total.
type PartialError struct {
	Applied []string
	Total   int
	Err     error
}

func (e *PartialError) Error() string {
	names := e.Applied
	if len(names) > 4 {
		names = append(slices.Clone(names[:4]), fmt.Sprintf("and %d more", len(e.Applied)-4))
	}
	return fmt.Sprintf("applied %d of %d objects (%s), then: %v", len(e.Applied), e.Total, strings.Join(names, ", "), e.Err)
}

func (e *PartialError) Unwrap() error { return e.Err }

// applyItem is one object to apply: its kind and name as kubectl prints them, and its apply.
type applyItem struct {
	ref   string
	apply func(ctx context.Context, dryRun bool) error
}

func item[T any](what, name string, obj any, patch patchFunc[T]) applyItem {
	return applyItem{ref: what + "/" + name, apply: func(ctx context.Context, dryRun bool) error {
		return apply(ctx, what, name, obj, patch, dryRun)
	}}
}

// applyAll applies serial one after the other, then parallel a few at a time (one apply at a time, a file of
// 1,000 Services spent most of its deploy waiting on round trips); the first error stops the rest. It returns
// what it applied.
func applyAll(ctx context.Context, serial, parallel []applyItem, dryRun bool, count func(n int)) ([]string, error) {
	var mu sync.Mutex
	var applied []string
	done := func(ref string) {
		mu.Lock()
		applied = append(applied, ref)
		count(len(applied))
		mu.Unlock()
	}
	for _, it := range serial {
		if err := it.apply(ctx, dryRun); err != nil {
			return applied, err
		}
		done(it.ref)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(applyParallelism)
	for _, it := range parallel {
		g.Go(func() error {
			if err := it.apply(gctx, dryRun); err != nil {
				return err
			}
			done(it.ref)
			return nil
		})
	}
	err := g.Wait()
	return applied, err
}

// applyParallelism is how many Service applies are in flight at once.
const applyParallelism = 8

// progressEvery is how many objects a progress line stands for; fewer objects than that get none.
const progressEvery = 1000

// counter says on progress, every progressEvery objects of total, how many are done (what: "applied").
func counter(progress io.Writer, total int, what string) func(n int) {
	return func(n int) {
		if progress != nil && total >= progressEvery && (n%progressEvery == 0 || n == total) {
			fmt.Fprintf(progress, "%d of %d objects %s\n", n, total, what)
		}
	}
}

// patchFunc is a typed client's Patch.
type patchFunc[T any] func(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)

// apply sends obj (with its TypeMeta set) as a server-side apply patch, or only as its dry run.
func apply[T any](ctx context.Context, what, name string, obj any, patch patchFunc[T], dryRun bool) error {
	data, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	opts := applyOptions()
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	// A server-side apply of the same object is idempotent: what the apiserver could not take now (too many
	// requests, a timeout, a restart) is sent again, with a back-off, rather than failing a deploy of thousands.
	err = retry.OnError(applyBackoff, func(err error) bool { return ctx.Err() == nil && retriable(err) }, func() error {
		_, err := patch(ctx, name, types.ApplyPatchType, data, opts)
		return err
	})
	if err != nil {
		return fmt.Errorf("%s/%s: %w", what, name, err)
	}
	return nil
}

// applyBackoff spaces the retries of one apply: about 12 s in all.
var applyBackoff = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 6, Cap: 5 * time.Second}

// retriable are the errors of an apply that may go through when sent again: the apiserver's throttling,
// timeouts and unavailability, and a connection that broke.
func retriable(err error) bool {
	if apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) {
		return true
	}
	if utilnet.IsConnectionReset(err) || utilnet.IsConnectionRefused(err) || utilnet.IsProbableEOF(err) {
		return true
	}
	var timeout interface{ Timeout() bool }
	return errors.As(err, &timeout) && timeout.Timeout()
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
// A Service of that name already there is used when it is what this would make (`make nodeport`, the guide's
// kubectl expose, made it), and refused, saying how it differs, when it is not.
func (w *workloads) Expose(ctx context.Context, opts lab.ExposeOptions) (*v1.Service, bool, error) {
	opts, err := ExposeDefaults(opts)
	if err != nil {
		return nil, false, err
	}
	d, err := w.cs.AppsV1().Deployments(opts.Namespace).Get(ctx, opts.Deployment, metav1.GetOptions{})
	if err != nil {
		return nil, false, err
	}
	want := ExposeService(d, opts)
	svc, err := w.cs.CoreV1().Services(opts.Namespace).Create(ctx, want, metav1.CreateOptions{FieldManager: FieldManager})
	if !apierrors.IsAlreadyExists(err) {
		return svc, err == nil, err
	}
	have, err := w.cs.CoreV1().Services(opts.Namespace).Get(ctx, opts.Service, metav1.GetOptions{})
	if err != nil {
		return nil, false, err
	}
	if diff := ExposedDiffers(have, want); diff != "" {
		return nil, false, fmt.Errorf("service/%s exists and is not what nodeport makes (%s): delete it (kubectl delete service %s) or pick another --service", have.Name, diff, have.Name)
	}
	return have, false, nil
}

// waitRollout waits until every replica of the Deployment's current template is ready and no old one is left,
// as `kubectl rollout status` does. A pod that cannot pull its image ends the wait at once, saying so.
func (w *workloads) waitRollout(ctx context.Context, namespace, name string) error {
	deadline := time.Now().Add(w.rollout)
	var downChecked time.Time
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
		if w.downForGood != nil && time.Since(downChecked) >= downNodeEvery {
			downChecked = time.Now()
			if err := w.podOnDownNode(ctx, d); err != nil {
				return err
			}
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

// podOnDownNode finds a pod of d that is not ready on a node that is down for good (nil if none).
func (w *workloads) podOnDownNode(ctx context.Context, d *appsv1.Deployment) error {
	down := w.downForGood()
	if len(down) == 0 {
		return nil
	}
	pods, err := w.podsOf(ctx, d)
	if err != nil {
		return err
	}
	for _, p := range pods {
		if why, ok := down[p.Spec.NodeName]; ok && p.DeletionTimestamp == nil && !podutil.IsPodReady(&p) {
			return &PodOnDownNodeError{Deployment: d.Name, Pod: p.Name, Node: p.Spec.NodeName, Why: why}
		}
	}
	return nil
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
