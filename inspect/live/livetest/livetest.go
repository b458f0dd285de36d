// Package livetest is a lab.Provider over snapshots, for tests of what reads a running lab (inspect/live and the
// commands in cmd/) without root, Docker or a lab. As knftables' Fake answers for nft, Lab answers for a lab: its
// nodes are those the snapshots' Kubernetes names list, the collector run in a node answers with that node's
// snapshot (what `k8sguide internal collect` printed there, its names taken off, since the real collector reads
// none), and its pods and Services are the snapshots' names. It runs nothing else: a connection, a kernel trace or
// a change to the lab fails with an error saying the fake does not make one, so a test cannot pass on a made-up
// answer.
package livetest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/inspect/snapshot"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/nodecmd"
)

// ToolPath is where the fake says a node's k8sguide is.
const ToolPath = "/usr/local/bin/k8sguide"

// Lab is one fake lab, named Name, over snapshots of its nodes.
type Lab struct {
	Name      string
	dataplane dataplanes.Name
	nodes     map[string]*snapshot.Snapshot // by node name
	names     *snapshot.Kubernetes
	collected map[string]int // the collector's runs, per node
}

// New makes lab name from snapshots of some of its nodes, all of one lab (the first's names are the lab's
// nodes, pods and Services). A node without a snapshot is listed, and collecting it fails.
func New(name string, snaps ...*snapshot.Snapshot) (*Lab, error) {
	if len(snaps) == 0 || snaps[0].Kubernetes == nil {
		return nil, fmt.Errorf("livetest: a fake lab needs a snapshot with the lab's Kubernetes names")
	}
	l := &Lab{Name: name, dataplane: snaps[0].Dataplane, nodes: map[string]*snapshot.Snapshot{}, names: snaps[0].Kubernetes, collected: map[string]int{}}
	for _, s := range snaps {
		if s.Node == "" || !slices.ContainsFunc(l.names.Nodes, func(n snapshot.Node) bool { return n.Name == s.Node }) {
			return nil, fmt.Errorf("livetest: snapshot of node %q, which the lab's names do not list", s.Node)
		}
		if s.Dataplane != l.dataplane {
			return nil, fmt.Errorf("livetest: snapshots of dataplanes %s and %s in one lab", l.dataplane, s.Dataplane)
		}
		l.nodes[s.Node] = s
	}
	return l, nil
}

// Provider is a lab.Provider holding fake labs.
type Provider struct {
	labs map[string]*Lab
}

// NewProvider holds labs.
func NewProvider(labs ...*Lab) *Provider {
	p := &Provider{labs: map[string]*Lab{}}
	for _, l := range labs {
		p.labs[l.Name] = l
	}
	return p
}

var _ lab.Provider = (*Provider)(nil)

// Name implements lab.Provider.
func (p *Provider) Name() string { return "fake" }

// Labs names the labs p holds, sorted.
func (p *Provider) Labs() []string {
	var names []string
	for n := range p.labs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Collected counts the collector's runs in lab name, per node: a test can tell what a command read.
func (p *Provider) Collected(name string) map[string]int {
	if l, ok := p.labs[name]; ok {
		return l.collected
	}
	return nil
}

func (p *Provider) lab(name string) (*Lab, error) {
	if l, ok := p.labs[name]; ok {
		return l, nil
	}
	return nil, &lab.NotFoundError{Kind: "lab", Name: name, Known: p.Labs()}
}

// Create implements lab.Provider: a fake lab is made by New, not built.
func (p *Provider) Create(context.Context, lab.Config, io.Writer) error {
	return fmt.Errorf("livetest: the fake provider builds no lab")
}

// Delete implements lab.Provider.
func (p *Provider) Delete(_ context.Context, name string) error {
	if _, err := p.lab(name); err != nil {
		return err
	}
	delete(p.labs, name)
	return nil
}

// List implements lab.Provider.
func (p *Provider) List(context.Context) ([]string, error) { return p.Labs(), nil }

// Status implements lab.Provider: the snapshots' nodes, every proxy running.
func (p *Provider) Status(_ context.Context, name string) (lab.Status, error) {
	l, err := p.lab(name)
	if err != nil {
		return lab.Status{}, err
	}
	st := lab.Status{Name: name, Provider: p.Name(), Dataplane: l.dataplane, Client: l.names.ClientIP, Proxies: map[string]lab.ProxyStatus{}}
	for _, n := range l.names.Nodes {
		role := lab.Worker
		if strings.HasSuffix(n.Name, "-control-plane") {
			role = lab.ControlPlane
		}
		st.Nodes = append(st.Nodes, lab.Node{Name: n.Name, Role: role, IP: n.IP})
		st.Proxies[n.Name] = lab.ProxyStatus{Running: true}
	}
	return st, nil
}

// Exec implements lab.Provider: the collector answers with the node's snapshot; nothing else runs.
func (p *Provider) Exec(_ context.Context, name, node string, argv []string, streams lab.Streams) error {
	l, err := p.lab(name)
	if err != nil {
		return err
	}
	if len(argv) < 3 || argv[0] != ToolPath || argv[1] != nodecmd.Group || argv[2] != "collect" {
		return fmt.Errorf("livetest: the fake lab runs only the collector, not %q", argv)
	}
	s, ok := l.nodes[node]
	if !ok {
		return fmt.Errorf("livetest: no snapshot of node %q", node)
	}
	l.collected[node]++
	c := *s
	c.Kubernetes, c.Lab = nil, ""
	return json.NewEncoder(streams.Out).Encode(&c)
}

// Workloads implements lab.Provider: the snapshots' pods and Services, read only.
func (p *Provider) Workloads(_ context.Context, name string) (lab.Workloads, error) {
	l, err := p.lab(name)
	if err != nil {
		return nil, err
	}
	return workloads{l.names}, nil
}

// ToolPath implements lab.Provider.
func (p *Provider) ToolPath(_ context.Context, name, _ string) (string, error) {
	if _, err := p.lab(name); err != nil {
		return "", err
	}
	return ToolPath, nil
}

// Kubeconfig implements lab.Provider: a fake lab has no apiserver.
func (p *Provider) Kubeconfig(context.Context, string) ([]byte, error) {
	return nil, fmt.Errorf("livetest: a fake lab has no apiserver")
}

// Get implements lab.Provider: a fake lab makes no connection.
func (p *Provider) Get(context.Context, string, string) (lab.Reply, error) {
	return lab.Reply{}, fmt.Errorf("livetest: a fake lab makes no connection")
}

type workloads struct{ k *snapshot.Kubernetes }

var errReadOnly = fmt.Errorf("livetest: a fake lab's workloads are read only")

func (workloads) Apply(context.Context, []*v1.ConfigMap, []*appsv1.Deployment, []*v1.Service, io.Writer) error {
	return errReadOnly
}
func (workloads) Scale(context.Context, string, string, int32) error { return errReadOnly }
func (workloads) Expose(context.Context, lab.ExposeOptions) (*v1.Service, bool, error) {
	return nil, false, errReadOnly
}
func (workloads) Deployments(context.Context) ([]appsv1.Deployment, error) { return nil, nil }
func (workloads) EndpointSlices(context.Context) ([]discoveryv1.EndpointSlice, error) {
	return nil, nil
}

func (w workloads) Pods(context.Context) ([]v1.Pod, error) {
	var out []v1.Pod
	for _, p := range w.k.Pods {
		out = append(out, v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name},
			Spec: v1.PodSpec{NodeName: p.Node}, Status: v1.PodStatus{PodIP: p.IP}})
	}
	return out, nil
}

func (w workloads) Services(context.Context) ([]v1.Service, error) {
	var out []v1.Service
	for _, s := range w.k.Services {
		svc := v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name}, Spec: v1.ServiceSpec{ClusterIP: s.ClusterIP}}
		for _, sp := range s.Ports {
			svc.Spec.Ports = append(svc.Spec.Ports, v1.ServicePort{Name: sp.Name, Protocol: v1.Protocol(sp.Protocol), Port: sp.Port, NodePort: sp.NodePort})
		}
		if slices.ContainsFunc(s.Ports, func(sp snapshot.ServicePort) bool { return sp.NodePort != 0 }) {
			svc.Spec.Type = v1.ServiceTypeNodePort
		}
		out = append(out, svc)
	}
	return out, nil
}
