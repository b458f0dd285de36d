package live

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	podutil "k8s.io/kubectl/pkg/util/podutils"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/engines"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/snapshot"
	"github.com/k8sguide/k8sguide/inspect/tracer"
	"github.com/k8sguide/k8sguide/lab"
)

// servingPoll is how often WaitServing reads the nodes again, after a read quicker than slowRead.
const (
	servingPoll = 100 * time.Millisecond
	slowRead    = 500 * time.Millisecond
)

// ServingTimeout is how long a command waits for the dataplanes to take its change: a kube-proxy sync of
// thousands of Services through iptables-restore with the nf_tables backend takes tens of seconds.
const ServingTimeout = 3 * time.Minute

// SelectsPodsOf tells whether svc sends to the pods of Deployment d (its selector matches d's pod template).
func SelectsPodsOf(svc *v1.Service, d *appsv1.Deployment) bool {
	return svc.Namespace == d.Namespace && len(svc.Spec.Selector) > 0 &&
		labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels))
}

// WaitServing returns once every node's dataplane sends new connections for each Service that want picks to
// exactly the endpoints the apiserver's EndpointSlices list as ready for it: a change made through the API is
// then in every node's kernel, whatever the proxy (kube-proxy's informers, Cilium's agent) and however long it
// took. It reads each node as `trace` does (a snapshot, then the tracer's walk of the Service's frontends) — the
// node's own rules, not a proxy's report — and compares:
//   - the NodePort on the node's address, from outside (unseenClient) (eTP Local: the node's own endpoints; see
//     expected for IPVS's exception), where
//     --nodeport-addresses serves it;
//   - the ClusterIP, from an address of the node's pod network (iTP Local: the node's own endpoints), except on
//     the ebpf dataplane, where the lab's pods have no bpf_lxc and a ClusterIP is served to nobody the tracer
//     can walk from (Cilium writes a Service's ClusterIP and NodePort entries in the same map update).
//
// A Service without ready endpoints is served when no walk delivers. It fails after timeout with what the
// kernel still does differently, in one line.
func WaitServing(ctx context.Context, p lab.Provider, name string, want func(*v1.Service) bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var sickSince time.Time
	agreed := agreements{}
	for {
		began := time.Now()
		diff, down, err := servingDiff(ctx, p, name, want, agreed)
		if err != nil {
			return err
		}
		if diff == "" && len(down) == 0 {
			return nil
		}
		if diff == "" {
			// Every node whose proxy runs has the change. A node whose proxy is down is given a moment (its
			// agent restarts it), then named rather than waited for until the timeout.
			if sickSince.IsZero() {
				sickSince = time.Now()
			}
			if time.Since(sickSince) > sickNodeGrace || time.Now().After(deadline) {
				return &NotServingError{Down: down}
			}
		} else {
			sickSince = time.Time{}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the lab's dataplane did not take the change within %s: %s", timeout, diff)
		}
		// The nodes' proxies and the apiserver share the machine with this loop, and it is their work it waits
		// for: a read that took long (thousands of Services: every node's rules, collected and parsed) is
		// followed by a pause twice as long, so that waiting takes at most about a third of a core. A quick read
		// (a lab of a few Services) is repeated at servingPoll, so that small changes return as soon as ever.
		pause := servingPoll
		if took := time.Since(began); took > slowRead {
			pause = 2 * took
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
	}
}

// agreements remembers, per node, the frontends whose walk already agreed with the API, keyed by the frontend
// and the endpoints the API wanted: a proxy that has taken a change keeps it, so each is walked until it agrees
// and not again (a deploy of thousands of Services would otherwise walk every one of them on every read), and a
// frontend whose endpoints change is walked again.
type agreements map[string]map[string]bool

func (a agreements) of(node string) map[string]bool {
	if a[node] == nil {
		a[node] = map[string]bool{}
	}
	return a[node]
}

// sickNodeGrace is how long WaitServing waits for a node whose proxy is down once every other node has the
// change: a proxy its agent restarts serves again within seconds.
const sickNodeGrace = 20 * time.Second

// NotServingError says which nodes could not be checked for a change because their proxy is down; the other
// nodes' kernels have it.
type NotServingError struct {
	// Down maps each such node to what is wrong with it.
	Down map[string]string
}

func (e *NotServingError) Error() string {
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(e.Down)) {
		parts = append(parts, fmt.Sprintf("node %s: %s", n, e.Down[n]))
	}
	return "the other nodes' dataplanes took the change; not checked on " + strings.Join(parts, "; ")
}

// servingDiff reads every node whose proxy runs once and says the first difference between the kernel and the
// API ("" if none); down are the nodes whose proxy does not run, with what is wrong with them.
func servingDiff(ctx context.Context, p lab.Provider, name string, want func(*v1.Service) bool, agreed agreements) (diff string, down map[string]string, err error) {
	st, err := p.Status(ctx, name)
	if err != nil {
		return "", nil, err
	}
	down = map[string]string{}
	for _, n := range st.Nodes {
		if ps, ok := st.Proxies[n.Name]; ok && !ps.Running {
			why := st.Problems[n.Name]
			if why == "" {
				why = "its proxy is not running"
			}
			down[n.Name] = why
		}
	}
	w, err := p.Workloads(ctx, name)
	if err != nil {
		return "", down, err
	}
	all, err := w.Services(ctx)
	if err != nil {
		return "", down, err
	}
	var svcs []v1.Service
	for i := range all {
		if want(&all[i]) {
			svcs = append(svcs, all[i])
		}
	}
	if len(svcs) == 0 {
		return "", nil, nil
	}
	list, err := w.EndpointSlices(ctx)
	if err != nil {
		return "", down, err
	}
	eps := slicesByService(list)
	// One listing of the names serves every node's walk.
	pods, err := w.Pods(ctx)
	if err != nil {
		return "", down, err
	}
	names := namesOf(st, pods, all)
	// The endpoints to compare with are the EndpointSlice controller's: it must have caught up with the pods
	// first, or a Service created a moment ago (no slice yet) would match a kernel that has it without
	// endpoints.
	podsByNamespace := map[string][]v1.Pod{}
	for _, pod := range pods {
		podsByNamespace[pod.Namespace] = append(podsByNamespace[pod.Namespace], pod)
	}
	for i := range svcs {
		if d := endpointsLag(&svcs[i], podsByNamespace[svcs[i].Namespace], eps.of(&svcs[i])); d != "" {
			return fmt.Sprintf("service %s/%s: %s", svcs[i].Namespace, svcs[i].Name, d), down, nil
		}
	}
	diffs := make([]string, len(st.Nodes))
	errs := make([]error, len(st.Nodes))
	var wg sync.WaitGroup
	for i, n := range st.Nodes {
		if _, ok := down[n.Name]; ok {
			continue
		}
		agreedOnNode := agreed.of(n.Name)
		wg.Go(func() {
			snap, err := collect(ctx, p, name, st, n.Name, "")
			if err != nil {
				errs[i] = err
				return
			}
			snap.Kubernetes = names
			diffs[i], errs[i] = nodeDiff(snap, st, n, svcs, eps, agreedOnNode)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return "", down, err
	}
	for _, d := range diffs {
		if d != "" {
			return d, down, nil
		}
	}
	return "", down, nil
}

// nodeDiff compares one node's walks with the API, skipping the frontends that agreed already (and adding
// those that agree now).
func nodeDiff(snap *snapshot.Snapshot, st lab.Status, n lab.Node, svcs []v1.Service, eps serviceSlices, agreed map[string]bool) (string, error) {
	face, ok := engines.Live(st.Dataplane)
	if !ok {
		return "", fmt.Errorf("dataplane %q is not one this k8sguide knows: it cannot say how it serves a Service", st.Dataplane)
	}
	walks := tracer.Open(snap) // parsed once for every Service's walks
	check := func(req tracer.Request, want []string) (string, error) {
		key := req.Proto + " " + req.Src + " " + req.Dst + " " + strings.Join(want, ",")
		if agreed[key] {
			return "", nil
		}
		d, err := frontendDiff(walks, req, want)
		if d == "" && err == nil {
			agreed[key] = true
		}
		return d, err
	}
	for _, svc := range svcs {
		eps := eps.of(&svc)
		for _, port := range svc.Spec.Ports {
			proto := strings.ToLower(string(port.Protocol))
			if proto != "tcp" && proto != "udp" {
				continue
			}
			if svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != v1.ClusterIPNone && face.PodsWalkClusterIPs && n.PodCIDR != "" {
				src, err := podNetworkSource(n.PodCIDR)
				if err != nil {
					return "", err
				}
				local := svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == v1.ServiceInternalTrafficPolicyLocal
				dst := net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(port.Port)))
				req := tracer.Request{Dst: dst, Src: src.String(), Proto: proto, From: "client", Quiet: true}
				if d, err := check(req, expected(face, &svc, port, eps, n.Name, local)); d != "" || err != nil {
					return describe(n, &svc, "ClusterIP "+dst, d), err
				}
			}
			if port.NodePort != 0 && servesNodePorts(st.NodePortAddresses, n.IP) {
				local := svc.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal
				dst := net.JoinHostPort(n.IP, strconv.Itoa(int(port.NodePort)))
				req := tracer.Request{Dst: dst, Src: unseenClient, Proto: proto, From: "client", Quiet: true}
				if d, err := check(req, expected(face, &svc, port, eps, n.Name, local)); d != "" || err != nil {
					return describe(n, &svc, "NodePort "+dst, d), err
				}
			}
		}
	}
	return "", nil
}

// servesNodePorts tells whether kube-proxy's --nodeport-addresses covers the node's address ("primary" is it;
// unset is every local address, or the primary one in nftables mode).
func servesNodePorts(cidrs []string, nodeIP string) bool {
	ip, err := netip.ParseAddr(nodeIP)
	if len(cidrs) == 0 || err != nil {
		return true
	}
	for _, c := range cidrs {
		if c == "primary" {
			return true
		}
		if p, err := netip.ParsePrefix(c); err == nil && p.Contains(ip) {
			return true
		}
	}
	return false
}

func describe(n lab.Node, svc *v1.Service, frontend, diff string) string {
	if diff == "" {
		return ""
	}
	return fmt.Sprintf("node %s, service %s/%s, %s: %s", n.Name, svc.Namespace, svc.Name, frontend, diff)
}

// frontendDiff walks one packet and compares the endpoints it can reach with want.
func frontendDiff(walks *tracer.Opened, req tracer.Request, want []string) (string, error) {
	t, err := walks.Trace(req)
	if err != nil {
		return "", err
	}
	var got []string
	for _, e := range t.Endpoints {
		if e.Probability > 0 {
			got = append(got, e.Addr())
		}
	}
	slices.Sort(got)
	if len(want) == 0 {
		if t.Verdict == trace.Delivered && len(got) > 0 {
			return fmt.Sprintf("the kernel still sends to %s; the API lists no ready endpoint", strings.Join(got, ", ")), nil
		}
		return "", nil
	}
	if !slices.Equal(got, want) {
		if len(got) == 0 {
			return fmt.Sprintf("the kernel sends to no endpoint (%s); the API lists %s", t.Verdict, strings.Join(want, ", ")), nil
		}
		return fmt.Sprintf("the kernel sends to %s; the API lists %s", strings.Join(got, ", "), strings.Join(want, ", ")), nil
	}
	return "", nil
}

// serviceSlices are a listing's IPv4 EndpointSlices by the Service they belong to (namespace/name), so that each
// Service finds its own without reading every slice of thousands.
type serviceSlices map[string][]discoveryv1.EndpointSlice

func slicesByService(list []discoveryv1.EndpointSlice) serviceSlices {
	by := serviceSlices{}
	for _, s := range list {
		if svc := s.Labels[discoveryv1.LabelServiceName]; svc != "" && s.AddressType == discoveryv1.AddressTypeIPv4 {
			by[s.Namespace+"/"+svc] = append(by[s.Namespace+"/"+svc], s)
		}
	}
	return by
}

// of are svc's slices.
func (by serviceSlices) of(svc *v1.Service) []discoveryv1.EndpointSlice {
	return by[svc.Namespace+"/"+svc.Name]
}

// endpointsLag says how the EndpointSlices of a Service with a selector still differ from its pods, as the
// EndpointSlice controller would publish them ("" when they agree): a slice must exist (the controller makes
// one even for no endpoints), and the ready addresses must be those of the selected pods that are Ready and not
// being deleted. The addresses are compared only where every port's targetPort is a number (a named one leaves
// out the pods that do not declare it) and not-ready addresses are not published as ready.
func endpointsLag(svc *v1.Service, pods []v1.Pod, eps []discoveryv1.EndpointSlice) string {
	if len(svc.Spec.Selector) == 0 {
		return "" // its slices are someone else's to write
	}
	var published []string
	found := false
	for _, s := range eps {
		if s.Namespace != svc.Namespace || s.Labels[discoveryv1.LabelServiceName] != svc.Name || s.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		found = true
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				published = append(published, e.Addresses...)
			}
		}
	}
	if !found {
		return "the EndpointSlice controller has not published its EndpointSlice yet"
	}
	if svc.Spec.PublishNotReadyAddresses {
		return ""
	}
	for _, port := range svc.Spec.Ports {
		if port.TargetPort.Type == intstr.String {
			return ""
		}
	}
	sel := labels.SelectorFromSet(svc.Spec.Selector)
	var ready []string
	for _, pod := range pods {
		if pod.Namespace == svc.Namespace && pod.Status.PodIP != "" && pod.DeletionTimestamp == nil &&
			sel.Matches(labels.Set(pod.Labels)) && podutil.IsPodReady(&pod) {
			ready = append(ready, pod.Status.PodIP)
		}
	}
	slices.Sort(published)
	published = slices.Compact(published)
	slices.Sort(ready)
	if !slices.Equal(published, ready) {
		return fmt.Sprintf("its EndpointSlices list %v ready, its pods %v: the EndpointSlice controller has not caught up", published, ready)
	}
	return ""
}

// expected are the endpoints a node's proxy sends a frontend to: the ready ones, only the node's own under a
// Local policy — except in IPVS mode, where a Local frontend on a node without a local endpoint gets every
// endpoint (kube-proxy's ipvs syncEndpoint, kubernetes#97081: so the node's own pods still reach the Service),
// which its Live face says.
func expected(face dataplanes.Live, svc *v1.Service, port v1.ServicePort, eps []discoveryv1.EndpointSlice, node string, local bool) []string {
	want := readyEndpoints(svc, port, eps, node, local)
	if local && len(want) == 0 && face.LocalFallsBackToAll {
		want = readyEndpoints(svc, port, eps, node, false)
	}
	return want
}

// readyEndpoints are the IP:PORTs the EndpointSlices of svc list as ready for port, sorted; onNode keeps only the
// endpoints on node (a Local traffic policy).
func readyEndpoints(svc *v1.Service, port v1.ServicePort, eps []discoveryv1.EndpointSlice, node string, onNode bool) []string {
	var out []string
	for _, s := range eps {
		if s.Namespace != svc.Namespace || s.Labels[discoveryv1.LabelServiceName] != svc.Name || s.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		for _, sp := range s.Ports {
			if sp.Port == nil || (sp.Name != nil && *sp.Name != port.Name) || (sp.Name == nil && port.Name != "") ||
				(sp.Protocol != nil && *sp.Protocol != port.Protocol) {
				continue
			}
			for _, e := range s.Endpoints {
				if e.Conditions.Ready != nil && !*e.Conditions.Ready {
					continue
				}
				if onNode && (e.NodeName == nil || *e.NodeName != node) {
					continue
				}
				for _, a := range e.Addresses {
					out = append(out, net.JoinHostPort(a, strconv.Itoa(int(*sp.Port))))
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// unseenClient is the source of WaitServing's NodePort walks: an outside address (TEST-NET-1, RFC 5737) that
// never sends in a lab, so no session-affinity record (kube-proxy's recent lists, IPVS persistence, Cilium's
// affinity map) holds it and the walk reaches every endpoint a new client can. From the lab's own client, a
// Service with ClientIP affinity walks to the one endpoint that client last reached, and never matches the API.
const unseenClient = "192.0.2.1"

// podNetworkSource is an address of the node's pod network no pod is given early (its last but one: pods get
// addresses from the bottom), for walking a pod's packet in at the node's pod bridge.
func podNetworkSource(podCIDR string) (netip.Addr, error) {
	prefix, err := netip.ParsePrefix(podCIDR)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("node pod CIDR %q: %w", podCIDR, err)
	}
	a := prefix.Masked().Addr().As4()
	host := uint32(1)<<(32-prefix.Bits()) - 2
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3]) + host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), nil
}
