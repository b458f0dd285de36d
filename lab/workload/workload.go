// Package workload does, for a lab without a control plane, what Kubernetes controllers do for a real cluster:
// it turns Deployments into Pods (ReplicaSet controller and scheduler, simplified to spreading over workers),
// gives Pods addresses from their node's pod CIDR (the IPAM plugin), and turns Services and ready Pods into
// EndpointSlices (the EndpointSlice controller, using its own helpers from k8s.io/endpointslice). The objects
// are the real API types, so kube-proxy consumes them exactly as it would from an apiserver.
package workload

import (
	"fmt"
	"net/netip"
	"sort"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/endpointslice"
	endpointsliceutil "k8s.io/endpointslice/util"
	"k8s.io/kubernetes/pkg/controller"
	"k8s.io/utils/ptr"

	"github.com/k8sguide/k8sguide/lab"
)

// ManagedBy is the value of endpointslice.kubernetes.io/managed-by on slices the lab makes, the controller's own.
const ManagedBy = "endpointslice-controller.k8s.io"

// Schedulable returns the nodes pods may run on. Like kind, the control-plane node carries the
// node-role.kubernetes.io/control-plane:NoSchedule taint, so workloads land on workers (the seeds' endpoints are
// all in 10.244.1.0/24 and 10.244.2.0/24). A lab without workers schedules on the control plane.
func Schedulable(nodes []lab.Node) []lab.Node {
	var out []lab.Node
	for _, n := range nodes {
		if n.Role == lab.Worker {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nodes
	}
	return out
}

// PodChanges is what reconciling a Deployment's replicas asks for.
type PodChanges struct {
	Create []v1.Pod
	Delete []v1.Pod
}

// Reconcile compares a Deployment's replicas with its pods and says which pods to create (already named,
// scheduled and addressed) and which to delete. New pods go to the node running the fewest of the Deployment's
// pods; scale-down removes the newest pods first, as the ReplicaSet controller does for pods of equal standing.
func Reconcile(d *appsv1.Deployment, pods []v1.Pod, nodes []lab.Node, now time.Time) (PodChanges, error) {
	selector, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return PodChanges{}, fmt.Errorf("deployment %s: %w", d.Name, err)
	}
	var owned []v1.Pod
	for _, p := range pods {
		if p.Namespace == d.Namespace && selector.Matches(labels.Set(p.Labels)) {
			owned = append(owned, p)
		}
	}
	want := int(ptr.Deref(d.Spec.Replicas, 1))
	var ch PodChanges
	if len(owned) > want {
		sort.SliceStable(owned, func(i, j int) bool {
			ti, tj := owned[i].CreationTimestamp, owned[j].CreationTimestamp
			if !ti.Equal(&tj) {
				return tj.Before(&ti)
			}
			return owned[i].Name > owned[j].Name
		})
		ch.Delete = owned[:len(owned)-want]
		return ch, nil
	}
	candidates := Schedulable(nodes)
	if len(candidates) == 0 {
		return ch, fmt.Errorf("deployment %s: no node to schedule on", d.Name)
	}
	perNode := map[string]int{}
	for _, p := range owned {
		perNode[p.Spec.NodeName]++
	}
	hash := controller.ComputeHash(&d.Spec.Template, d.Status.CollisionCount)
	all := append([]v1.Pod(nil), pods...)
	for i := len(owned); i < want; i++ {
		node := candidates[0]
		for _, n := range candidates[1:] {
			if perNode[n.Name] < perNode[node.Name] {
				node = n
			}
		}
		ip, err := nextPodIP(node, all)
		if err != nil {
			return PodChanges{}, err
		}
		pod := newPod(d, hash, node, ip, now)
		perNode[node.Name]++
		all = append(all, pod)
		ch.Create = append(ch.Create, pod)
	}
	return ch, nil
}

func newPod(d *appsv1.Deployment, hash string, node lab.Node, ip netip.Addr, now time.Time) v1.Pod {
	rsName := d.Name + "-" + hash
	podLabels := map[string]string{appsv1.DefaultDeploymentUniqueLabelKey: hash}
	for k, v := range d.Spec.Template.Labels {
		podLabels[k] = v
	}
	name := rsName + "-" + utilrand.String(5)
	return v1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:              name,
			Namespace:         d.Namespace,
			UID:               types.UID(utilrand.String(16)),
			Labels:            podLabels,
			CreationTimestamp: metav1.NewTime(now),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rsName, Controller: ptr.To(true),
			}},
		},
		Spec: func() v1.PodSpec {
			s := *d.Spec.Template.Spec.DeepCopy()
			s.NodeName = node.Name
			return s
		}(),
		Status: v1.PodStatus{
			Phase:  v1.PodPending,
			HostIP: node.IP, HostIPs: []v1.HostIP{{IP: node.IP}},
			PodIP: ip.String(), PodIPs: []v1.PodIP{{IP: ip.String()}},
		},
	}
}

// MarkReady records that a pod's server answers: Running, with the Ready condition, as the kubelet would after
// its readiness probe passed.
func MarkReady(p *v1.Pod, now time.Time) {
	p.Status.Phase = v1.PodRunning
	p.Status.StartTime = ptr.To(metav1.NewTime(now))
	p.Status.Conditions = []v1.PodCondition{
		{Type: v1.PodReady, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(now)},
		{Type: v1.ContainersReady, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(now)},
	}
}

// nextPodIP gives the lowest free address of the node's pod CIDR, after the gateway (.1), like host-local IPAM.
func nextPodIP(node lab.Node, pods []v1.Pod) (netip.Addr, error) {
	prefix, err := netip.ParsePrefix(node.PodCIDR)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("node %s: pod CIDR %q: %w", node.Name, node.PodCIDR, err)
	}
	used := map[string]bool{}
	for _, p := range pods {
		used[p.Status.PodIP] = true
	}
	gw := prefix.Masked().Addr().Next()
	for ip := gw.Next(); prefix.Contains(ip); ip = ip.Next() {
		if !prefix.Contains(ip.Next()) { // broadcast
			break
		}
		if !used[ip.String()] {
			return ip, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("node %s: pod CIDR %s is full", node.Name, node.PodCIDR)
}

// Gateway is the node-side address of a pod CIDR (the pod bridge's address, the pods' default gateway).
func Gateway(podCIDR string) (netip.Prefix, error) {
	prefix, err := netip.ParsePrefix(podCIDR)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(prefix.Masked().Addr().Next(), prefix.Bits()), nil
}

// EndpointSlices builds the EndpointSlice of every Service with a selector from the pods it selects, as the
// EndpointSlice controller does (one slice per Service here: the lab never nears 100 endpoints). A Service's
// existing slice keeps its name, so kube-proxy sees an update, not a delete and an add.
func EndpointSlices(services []v1.Service, pods []v1.Pod, existing []discoveryv1.EndpointSlice, generation int64, now time.Time) []discoveryv1.EndpointSlice {
	oldByService := map[string]discoveryv1.EndpointSlice{}
	for _, s := range existing {
		oldByService[s.Namespace+"/"+s.Labels[discoveryv1.LabelServiceName]] = s
	}
	var out []discoveryv1.EndpointSlice
	for i := range services {
		svc := &services[i]
		if svc.Spec.Selector == nil {
			continue
		}
		selector := labels.SelectorFromSet(svc.Spec.Selector)
		slice := discoveryv1.EndpointSlice{
			TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
			ObjectMeta: metav1.ObjectMeta{
				Namespace: svc.Namespace,
				Labels: map[string]string{
					discoveryv1.LabelServiceName: svc.Name,
					discoveryv1.LabelManagedBy:   ManagedBy,
				},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID, Controller: ptr.To(true)}},
			},
			AddressType: discoveryv1.AddressTypeIPv4,
		}
		old, had := oldByService[svc.Namespace+"/"+svc.Name]
		if had {
			slice.Name, slice.UID, slice.CreationTimestamp = old.Name, old.UID, old.CreationTimestamp
		} else {
			slice.Name = svc.Name + "-" + utilrand.String(5)
			slice.UID = types.UID(utilrand.String(16))
			slice.CreationTimestamp = metav1.NewTime(now)
		}
		var ports []discoveryv1.EndpointPort
		for j := range pods {
			pod := &pods[j]
			if pod.Namespace != svc.Namespace || !selector.Matches(labels.Set(pod.Labels)) || !endpointsliceutil.ShouldPodBeInEndpoints(pod, true) {
				continue
			}
			if ports == nil {
				ports = endpointPorts(svc, pod)
			}
			ready := endpointsliceutil.IsPodReady(pod) && pod.DeletionTimestamp == nil
			serving := endpointsliceutil.IsPodReady(pod)
			slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{pod.Status.PodIP},
				Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: ptr.To(pod.DeletionTimestamp != nil)},
				NodeName:   ptr.To(pod.Spec.NodeName),
				TargetRef:  &v1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
			})
		}
		if ports == nil {
			ports = []discoveryv1.EndpointPort{}
		}
		slice.Ports = ports
		sort.Slice(slice.Endpoints, func(a, b int) bool { return slice.Endpoints[a].Addresses[0] < slice.Endpoints[b].Addresses[0] })
		if had && equalSlices(&old, &slice) {
			out = append(out, old)
			continue
		}
		slice.ResourceVersion = fmt.Sprint(generation)
		out = append(out, slice)
	}
	return out
}

// endpointPorts mirrors the controller's getEndpointPorts: a Service port whose target the pod lacks is left out.
func endpointPorts(svc *v1.Service, pod *v1.Pod) []discoveryv1.EndpointPort {
	var out []discoveryv1.EndpointPort
	for i := range svc.Spec.Ports {
		sp := &svc.Spec.Ports[i]
		port, err := endpointslice.FindPort(pod, sp)
		if err != nil {
			continue
		}
		out = append(out, discoveryv1.EndpointPort{
			Name: ptr.To(sp.Name), Port: ptr.To(int32(port)), Protocol: ptr.To(sp.Protocol), AppProtocol: sp.AppProtocol,
		})
	}
	return out
}

func equalSlices(a, b *discoveryv1.EndpointSlice) bool {
	return apiequality.Semantic.DeepEqual(a.Endpoints, b.Endpoints) && apiequality.Semantic.DeepEqual(a.Ports, b.Ports)
}

// ExposeDefaults checks `nodeport`'s options and fills what kubectl expose would: the default namespace, the
// Service named after the Deployment, targetPort equal to the port.
func ExposeDefaults(opts lab.ExposeOptions) (lab.ExposeOptions, error) {
	if opts.Namespace == "" {
		opts.Namespace = metav1.NamespaceDefault
	}
	if opts.Service == "" {
		opts.Service = opts.Deployment
	}
	if opts.Port <= 0 || opts.Port > 65535 {
		return opts, fmt.Errorf("--port %d: must be 1-65535", opts.Port)
	}
	if opts.TargetPort == 0 {
		opts.TargetPort = opts.Port
	}
	return opts, nil
}

// ExposeService is the Service `kubectl expose deployment NAME --type=NodePort --port=PORT [--target-port=N]`
// creates for d: the Deployment's labels and selector, one unnamed TCP port. opts has had ExposeDefaults.
func ExposeService(d *appsv1.Deployment, opts lab.ExposeOptions) *v1.Service {
	return &v1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: opts.Service, Namespace: opts.Namespace, Labels: d.Labels},
		Spec: v1.ServiceSpec{
			Type:                  v1.ServiceTypeNodePort,
			Selector:              d.Spec.Selector.MatchLabels,
			ExternalTrafficPolicy: opts.ExternalTrafficPolicy,
			Ports: []v1.ServicePort{{
				Protocol: v1.ProtocolTCP, Port: opts.Port, TargetPort: intstr.FromInt32(opts.TargetPort), NodePort: opts.NodePort,
			}},
		},
	}
}
