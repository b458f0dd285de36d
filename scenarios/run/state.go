package run

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/scenarios"
)

// labState is what the lab looks like now, read with `k8sguide get … -o json` (the commands a student would use)
// when a reference needs it, and forgotten after every action step.
type labState struct {
	c       *cellRun
	status  *lab.Status
	svcs    []v1.Service
	pods    []v1.Pod
	deps    []appsv1.Deployment
	slices  []discoveryv1.EndpointSlice
	fetched bool
}

func (l *labState) forget() { *l = labState{c: l.c} }

func (l *labState) load(ctx context.Context) error {
	if l.fetched {
		return nil
	}
	get := func(what string, into any) error {
		out, err := l.c.k8sguide(ctx, "get", what, "-o", "json", "--name", l.c.lab)
		if err != nil {
			return fmt.Errorf("k8sguide get %s: %v", what, err)
		}
		if err := json.Unmarshal([]byte(out), into); err != nil {
			return fmt.Errorf("k8sguide get %s -o json: %v", what, err)
		}
		return nil
	}
	var st lab.Status
	var svcs v1.ServiceList
	var pods v1.PodList
	var deps appsv1.DeploymentList
	var eps discoveryv1.EndpointSliceList
	for what, into := range map[string]any{"nodes": &st, "services": &svcs, "pods": &pods, "deployments": &deps, "endpointslices": &eps} {
		if err := get(what, into); err != nil {
			return err
		}
	}
	l.status, l.svcs, l.pods, l.deps, l.slices, l.fetched = &st, svcs.Items, pods.Items, deps.Items, eps.Items, true
	return nil
}

// nodeName is a node's full name from its short one (worker2 -> LAB-worker2).
func (l *labState) nodeName(short string) string { return l.c.lab + "-" + short }

func (l *labState) node(short string) (lab.Node, error) {
	for _, n := range l.status.Nodes {
		if n.Name == l.nodeName(short) {
			return n, nil
		}
	}
	return lab.Node{}, fmt.Errorf("the lab has no node %s", l.nodeName(short))
}

// nodeAddrs are the addresses a node's SNAT can show: its own, and its pod bridge's (the gateway of its pod CIDR,
// what a pod on the node sees when the node masquerades towards it).
func (l *labState) nodeAddrs(short string) ([]string, error) {
	n, err := l.node(short)
	if err != nil {
		return nil, err
	}
	addrs := []string{n.IP}
	if p, err := netip.ParsePrefix(n.PodCIDR); err == nil {
		addrs = append(addrs, p.Masked().Addr().Next().String())
	}
	return addrs, nil
}

func (l *labState) service(name string) (*v1.Service, error) {
	for i := range l.svcs {
		if s := &l.svcs[i]; s.Name == name && s.Namespace == "default" {
			return s, nil
		}
	}
	return nil, fmt.Errorf("the lab has no Service %s", name)
}

// podOn is the first ready pod of a Deployment on a node (by name).
func (l *labState) podOn(deployment, short string) (*v1.Pod, error) {
	var sel labels.Selector
	for _, d := range l.deps {
		if d.Name == deployment && d.Namespace == "default" {
			s, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
			if err != nil {
				return nil, err
			}
			sel = s
		}
	}
	if sel == nil {
		return nil, fmt.Errorf("the lab has no Deployment %s", deployment)
	}
	var found []*v1.Pod
	for i := range l.pods {
		p := &l.pods[i]
		if p.Namespace == "default" && p.Spec.NodeName == l.nodeName(short) && p.DeletionTimestamp == nil && sel.Matches(labels.Set(p.Labels)) && ready(p) {
			found = append(found, p)
		}
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("no ready pod of %s runs on %s", deployment, l.nodeName(short))
	}
	slices.SortFunc(found, func(a, b *v1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return found[0], nil
}

func ready(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// endpoint is one ready endpoint of a Service: its pod and node.
type endpoint struct {
	Pod  string // namespace/name
	Node string // full node name
}

// endpoints are a Service's ready endpoints, from its EndpointSlices.
func (l *labState) endpoints(service string) []endpoint {
	var out []endpoint
	for _, s := range l.slices {
		if s.Namespace != "default" || s.Labels[discoveryv1.LabelServiceName] != service {
			continue
		}
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready || e.TargetRef == nil {
				continue
			}
			ep := endpoint{Pod: e.TargetRef.Namespace + "/" + e.TargetRef.Name}
			if e.NodeName != nil {
				ep.Node = *e.NodeName
			}
			if !slices.Contains(out, ep) {
				out = append(out, ep)
			}
		}
	}
	return out
}

// resolve is what a reference stands for in the lab as it is now.
func (l *labState) resolve(ctx context.Context, r scenarios.Ref) (string, error) {
	if err := l.load(ctx); err != nil {
		return "", err
	}
	switch r.What {
	case "client":
		if l.status.Client == "" {
			return "", fmt.Errorf("${client}: the lab does not say its client's address")
		}
		return l.status.Client, nil
	case "node":
		n, err := l.node(r.Name)
		return n.IP, err
	case "service":
		s, err := l.service(r.Name)
		if err != nil {
			return "", err
		}
		switch r.Field {
		case "clusterIP":
			return s.Spec.ClusterIP, nil
		case "port", "nodePort":
			if len(s.Spec.Ports) == 0 {
				return "", fmt.Errorf("${service.%s.%s}: the Service has no ports", r.Name, r.Field)
			}
			if r.Field == "port" {
				return strconv.Itoa(int(s.Spec.Ports[0].Port)), nil
			}
			if s.Spec.Ports[0].NodePort == 0 {
				return "", fmt.Errorf("${service.%s.nodePort}: the Service has no NodePort (type %s)", r.Name, s.Spec.Type)
			}
			return strconv.Itoa(int(s.Spec.Ports[0].NodePort)), nil
		}
	case "pod":
		p, err := l.podOn(r.Name, r.Node)
		if err != nil {
			return "", err
		}
		return p.Status.PodIP, nil
	}
	return "", fmt.Errorf("unknown reference %+v", r)
}

// expand replaces the references in s.
func (l *labState) expand(ctx context.Context, s string) (string, error) {
	return scenarios.Expand(s, func(r scenarios.Ref) (string, error) { return l.resolve(ctx, r) })
}

// place is where a packet starts, as the trace and connect commands' flags say it, and the node it starts on
// (short name; "" for the client).
type place struct {
	args  []string // --from … [--node …]
	node  string
	addr  string // the sender's own address
	pod   string // the sending pod, namespace/name
	label string
}

func (l *labState) place(ctx context.Context, from string) (place, error) {
	if err := l.load(ctx); err != nil {
		return place{}, err
	}
	switch {
	case from == "" || from == "client":
		return place{args: []string{"--from", "client"}, addr: l.status.Client, label: "client"}, nil
	case strings.HasPrefix(from, "node/"):
		short := strings.TrimPrefix(from, "node/")
		n, err := l.node(short)
		if err != nil {
			return place{}, err
		}
		return place{args: []string{"--from", "node", "--node", n.Name}, node: short, addr: n.IP, label: n.Name}, nil
	case strings.HasPrefix(from, "pod/"):
		dep, short, _ := strings.Cut(strings.TrimPrefix(from, "pod/"), "@")
		p, err := l.podOn(dep, short)
		if err != nil {
			return place{}, err
		}
		return place{args: []string{"--from", "pod/" + p.Name}, node: short, addr: p.Status.PodIP, pod: p.Namespace + "/" + p.Name, label: "pod/" + p.Name}, nil
	}
	return place{}, fmt.Errorf("from %q: want client, node/NODE or pod/DEPLOYMENT@NODE", from)
}
