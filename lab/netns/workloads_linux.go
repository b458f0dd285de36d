package netns

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"

	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/alloc"
	"github.com/k8sguide/k8sguide/lab/nodecmd"
	"github.com/k8sguide/k8sguide/lab/state"
	"github.com/k8sguide/k8sguide/lab/workload"
)

// workloads is the netns lab's object store: the lab state on disk plays the apiserver, and the functions of
// package workload play the controllers.
type workloads struct {
	p    *Provider
	name string
}

func (p *Provider) Workloads(ctx context.Context, name string) (lab.Workloads, error) {
	if _, err := p.Store.Brief(name); err != nil {
		return nil, err
	}
	return &workloads{p: p, name: name}, nil
}

func podNamespace(labName, pod string) string { return labName + "-pod-" + pod }

// update runs fn on the locked state, then brings pods and EndpointSlices in line with it, saves, and waits for
// every node's proxy to apply the result.
func (w *workloads) update(ctx context.Context, fn func(st *state.Lab, now time.Time) error) error {
	if err := checkRoot(); err != nil {
		return err
	}
	h, err := w.p.Store.Lock(w.name)
	if err != nil {
		return err
	}
	defer h.Close()
	st, err := h.Load()
	if err != nil {
		return err
	}
	if st.Phase != state.Ready {
		return fmt.Errorf("lab %s is not ready (phase %q)", w.name, st.Phase)
	}
	now := time.Now()
	if err := fn(st, now); err != nil {
		return err
	}
	if err := w.reconcilePods(ctx, h, st, now); err != nil {
		return err
	}
	st.EndpointSlices = workload.EndpointSlices(st.Services, st.Pods, st.EndpointSlices, st.Generation+1, now)
	if err := h.Save(st); err != nil {
		return err
	}
	return w.p.waitForProxies(ctx, st)
}

// reconcilePods creates and deletes pod namespaces until every Deployment has its replicas. A pod's namespace is
// recorded (and saved) before it is made, so nothing it leaves can escape `down`; a pod that fails is removed
// again and the error returned.
func (w *workloads) reconcilePods(ctx context.Context, h *state.Handle, st *state.Lab, now time.Time) error {
	for i := range st.Deployments {
		d := &st.Deployments[i]
		ch, err := workload.Reconcile(d, st.Pods, st.Nodes, now)
		if err != nil {
			return err
		}
		for _, pod := range ch.Delete {
			if err := removeNamespace(ctx, podNamespace(w.name, pod.Name)); err != nil {
				return err
			}
			st.Pods = removePod(st.Pods, pod.Name)
			st.Namespaces = removeString(st.Namespaces, podNamespace(w.name, pod.Name))
		}
		for _, pod := range ch.Create {
			ns := podNamespace(w.name, pod.Name)
			st.Namespaces = append(st.Namespaces, ns)
			if err := h.Save(st); err != nil {
				return err
			}
			if err := w.startPod(ctx, st, &pod); err != nil {
				cleanup, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				removeNamespace(cleanup, ns)
				cancel()
				st.Namespaces = removeString(st.Namespaces, ns)
				h.Save(st)
				return fmt.Errorf("pod %s: %w", pod.Name, err)
			}
			workload.MarkReady(&pod, time.Now())
			st.Pods = append(st.Pods, pod)
		}
		d.Status.Replicas = ptr.Deref(d.Spec.Replicas, 1)
		d.Status.ReadyReplicas, d.Status.AvailableReplicas, d.Status.UpdatedReplicas = d.Status.Replicas, d.Status.Replicas, d.Status.Replicas
	}
	return nil
}

// startPod makes a pod's namespace, plugs it into its node's pod bridge with hairpin on (so a pod reaches itself
// through its own Service), starts the pod server on the container ports, and waits until it answers from the
// node, as a kubelet readiness probe would.
func (w *workloads) startPod(ctx context.Context, st *state.Lab, pod *v1.Pod) error {
	node, ok := st.Node(pod.Spec.NodeName)
	if !ok {
		return fmt.Errorf("node %s not in lab", pod.Spec.NodeName)
	}
	ns := podNamespace(w.name, pod.Name)
	sum := sha1.Sum([]byte(pod.Namespace + "/" + pod.Name))
	hostVeth := "veth" + hex.EncodeToString(sum[:])[:8]
	gw, err := workload.Gateway(node.PodCIDR)
	if err != nil {
		return err
	}
	for _, args := range [][]string{
		{"netns", "add", ns},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", node.Name, "link", "add", hostVeth, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"-n", node.Name, "link", "set", hostVeth, "master", "cni0"},
		{"-n", node.Name, "link", "set", hostVeth, "type", "bridge_slave", "hairpin", "on"},
		{"-n", node.Name, "link", "set", hostVeth, "up"},
		{"-n", ns, "addr", "add", fmt.Sprintf("%s/%d", pod.Status.PodIP, gw.Bits()), "dev", "eth0"},
		{"-n", ns, "link", "set", "eth0", "up"},
		{"-n", ns, "route", "add", "default", "via", gw.Addr().String()},
		// The address may have belonged to a deleted pod: forget its old MAC now rather than after the
		// neighbour entry times out (readiness probes and traffic would go to nobody until then).
		{"-n", node.Name, "neigh", "flush", "to", pod.Status.PodIP},
	} {
		if err := ipCmd(ctx, args...); err != nil {
			return err
		}
	}
	ports := containerPorts(pod)
	pid, err := startDetached(ns, w.p.podLog(w.name, pod.Name), nodecmd.PodServerArgv(w.p.Exe, pod.Name, node.Name, ports))
	if err != nil {
		return err
	}
	// A server that dies is reported at once; one that is slow to start (an emulated CPU, a loaded machine)
	// gets a minute.
	addr := net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(ports[0]))
	deadline := time.Now().Add(podReadyTimeout)
	for {
		_, err := httpGet(ctx, node.Name, addr)
		if err == nil {
			return nil
		}
		if !processAlive(pid) {
			return fmt.Errorf("its server exited before it was ready: %v; log:\n%s", err, tail(w.p.podLog(w.name, pod.Name), 10))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %s: %v; log:\n%s", podReadyTimeout, err, tail(w.p.podLog(w.name, pod.Name), 10))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// podReadyTimeout bounds the wait for a pod's server to answer.
const podReadyTimeout = time.Minute

// containerPorts are the TCP ports the pod's containers declare; a pod that declares none serves 80.
func containerPorts(pod *v1.Pod) []int {
	var ports []int
	for _, c := range pod.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Protocol == "" || cp.Protocol == v1.ProtocolTCP {
				ports = append(ports, int(cp.ContainerPort))
			}
		}
	}
	if len(ports) == 0 {
		ports = []int{80}
	}
	return ports
}

func (p *Provider) podLog(labName, pod string) string {
	return p.Store.Dir(labName) + "/pod-" + pod + ".log"
}

// Apply keeps Deployments and Services. ConfigMaps are accepted and not kept: a netns pod runs k8sguide's own
// server, which has no configuration to mount.
func (w *workloads) Apply(ctx context.Context, _ []*v1.ConfigMap, deployments []*appsv1.Deployment, services []*v1.Service) error {
	return w.update(ctx, func(st *state.Lab, now time.Time) error {
		for _, d := range deployments {
			d = d.DeepCopy()
			if d.Namespace == "" {
				d.Namespace = metav1.NamespaceDefault
			}
			if d.Spec.Replicas == nil {
				d.Spec.Replicas = ptr.To[int32](1)
			}
			d.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
			d.ResourceVersion = fmt.Sprint(st.Generation + 1)
			if i := findDeployment(st.Deployments, d.Namespace, d.Name); i >= 0 {
				old := st.Deployments[i]
				d.UID, d.CreationTimestamp, d.Status = old.UID, old.CreationTimestamp, old.Status
				st.Deployments[i] = *d
			} else {
				d.UID = types.UID(utilrand.String(16))
				d.CreationTimestamp = metav1.NewTime(now)
				st.Deployments = append(st.Deployments, *d)
			}
		}
		for _, s := range services {
			if err := w.putService(st, s.DeepCopy(), now, true); err != nil {
				return err
			}
		}
		return nil
	})
}

func (w *workloads) Scale(ctx context.Context, namespace, name string, replicas int32) error {
	if replicas < 0 {
		return fmt.Errorf("--replicas %d: must be 0 or more", replicas)
	}
	return w.update(ctx, func(st *state.Lab, now time.Time) error {
		i := findDeployment(st.Deployments, namespace, name)
		if i < 0 {
			return apierrors.NewNotFound(schema.GroupResource{Group: "apps", Resource: "deployments"}, name)
		}
		st.Deployments[i].Spec.Replicas = ptr.To(replicas)
		st.Deployments[i].ResourceVersion = fmt.Sprint(st.Generation + 1)
		return nil
	})
}

// Expose creates the NodePort Service `kubectl expose` would (workload.ExposeService).
func (w *workloads) Expose(ctx context.Context, opts lab.ExposeOptions) (*v1.Service, error) {
	opts, err := workload.ExposeDefaults(opts)
	if err != nil {
		return nil, err
	}
	var created *v1.Service
	err = w.update(ctx, func(st *state.Lab, now time.Time) error {
		i := findDeployment(st.Deployments, opts.Namespace, opts.Deployment)
		if i < 0 {
			return apierrors.NewNotFound(schema.GroupResource{Group: "apps", Resource: "deployments"}, opts.Deployment)
		}
		svc := workload.ExposeService(&st.Deployments[i], opts)
		if err := w.putService(st, svc, now, false); err != nil {
			return err
		}
		created = svc
		return nil
	})
	return created, err
}

// putService stores a Service after the apiserver's defaulting and allocation. An existing Service is updated
// only by apply, keeping its ClusterIP and NodePorts, as the apiserver does for an update that omits them.
func (w *workloads) putService(st *state.Lab, svc *v1.Service, now time.Time, update bool) error {
	if svc.Namespace == "" {
		svc.Namespace = metav1.NamespaceDefault
	}
	defaultService(svc)
	svc.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}
	svc.ResourceVersion = fmt.Sprint(st.Generation + 1)
	svc.UID, svc.CreationTimestamp = types.UID(utilrand.String(16)), metav1.NewTime(now)
	at, others := -1, st.Services
	for i, old := range st.Services {
		if old.Namespace != svc.Namespace || old.Name != svc.Name {
			continue
		}
		if !update {
			return apierrors.NewAlreadyExists(schema.GroupResource{Resource: "services"}, svc.Name)
		}
		at, others = i, append(append([]v1.Service(nil), st.Services[:i]...), st.Services[i+1:]...)
		svc.UID, svc.CreationTimestamp = old.UID, old.CreationTimestamp
		if svc.Spec.ClusterIP == "" {
			svc.Spec.ClusterIP = old.Spec.ClusterIP
		}
		for j := range svc.Spec.Ports {
			for _, op := range old.Spec.Ports {
				if svc.Spec.Ports[j].NodePort == 0 && op.Port == svc.Spec.Ports[j].Port && op.Protocol == svc.Spec.Ports[j].Protocol {
					svc.Spec.Ports[j].NodePort = op.NodePort
				}
			}
		}
	}
	a, err := alloc.New(lab.ServiceSubnet, st.Config.NodePortRange, others)
	if err != nil {
		return err
	}
	if err := a.Allocate(svc); err != nil {
		return err
	}
	if at >= 0 {
		st.Services[at] = *svc
	} else {
		st.Services = append(st.Services, *svc)
	}
	return nil
}

// defaultService applies the apiserver's defaults that kube-proxy reads.
func defaultService(svc *v1.Service) {
	if svc.Spec.Type == "" {
		svc.Spec.Type = v1.ServiceTypeClusterIP
	}
	if svc.Spec.SessionAffinity == "" {
		svc.Spec.SessionAffinity = v1.ServiceAffinityNone
	}
	if svc.Spec.SessionAffinity == v1.ServiceAffinityClientIP && svc.Spec.SessionAffinityConfig == nil {
		svc.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To(v1.DefaultClientIPServiceAffinitySeconds)}}
	}
	if svc.Spec.Type == v1.ServiceTypeNodePort || svc.Spec.Type == v1.ServiceTypeLoadBalancer {
		if svc.Spec.ExternalTrafficPolicy == "" {
			svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyCluster
		}
	}
	if svc.Spec.InternalTrafficPolicy == nil {
		svc.Spec.InternalTrafficPolicy = ptr.To(v1.ServiceInternalTrafficPolicyCluster)
	}
	svc.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol}
	svc.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicySingleStack)
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		if p.Protocol == "" {
			p.Protocol = v1.ProtocolTCP
		}
		if p.TargetPort == (intstr.IntOrString{}) {
			p.TargetPort = intstr.FromInt32(p.Port)
		}
	}
}

// read is the lab's shared state (see state.Store.View): the getters below hand out copies.
func (w *workloads) read() (*state.Lab, error) { return w.p.Store.View(w.name) }

func (w *workloads) Deployments(ctx context.Context) ([]appsv1.Deployment, error) {
	st, err := w.read()
	if err != nil {
		return nil, err
	}
	return deepCopies(st.Deployments, (*appsv1.Deployment).DeepCopy), nil
}

func (w *workloads) Pods(ctx context.Context) ([]v1.Pod, error) {
	st, err := w.read()
	if err != nil {
		return nil, err
	}
	return deepCopies(st.Pods, (*v1.Pod).DeepCopy), nil
}

func (w *workloads) Services(ctx context.Context) ([]v1.Service, error) {
	st, err := w.read()
	if err != nil {
		return nil, err
	}
	return deepCopies(st.Services, (*v1.Service).DeepCopy), nil
}

func (w *workloads) EndpointSlices(ctx context.Context) ([]discoveryv1.EndpointSlice, error) {
	st, err := w.read()
	if err != nil {
		return nil, err
	}
	return deepCopies(st.EndpointSlices, (*discoveryv1.EndpointSlice).DeepCopy), nil
}

func deepCopies[T any](in []T, deepCopy func(*T) *T) []T {
	if in == nil {
		return nil
	}
	out := make([]T, len(in))
	for i := range in {
		out[i] = *deepCopy(&in[i])
	}
	return out
}

func findDeployment(ds []appsv1.Deployment, namespace, name string) int {
	for i := range ds {
		if ds[i].Namespace == namespace && ds[i].Name == name {
			return i
		}
	}
	return -1
}

func removePod(pods []v1.Pod, name string) []v1.Pod {
	out := pods[:0]
	for _, p := range pods {
		if p.Name != name {
			out = append(out, p)
		}
	}
	return out
}

func removeString(ss []string, s string) []string {
	out := ss[:0]
	for _, x := range ss {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}
