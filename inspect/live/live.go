// Package live reads a running lab's nodes: snapshots taken inside a node, the NodePort of a Service, and
// `trace --verify`, which makes a real connection and compares the kernel's record of it with the offline
// trace's prediction. It needs a lab.Provider; the command line chooses which.
package live

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/request"
	"github.com/k8sguide/k8sguide/inspect/snapshot"
	"github.com/k8sguide/k8sguide/inspect/tracer"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/nodecmd"
	v1 "k8s.io/api/core/v1"
)

// NodeOf checks that node is one of the lab's nodes.
func NodeOf(st lab.Status, node string) (lab.Node, error) {
	var known []string
	for _, n := range st.Nodes {
		if n.Name == node {
			return n, nil
		}
		known = append(known, n.Name)
	}
	return lab.Node{}, &lab.NotFoundError{Kind: "node", Name: node, Known: known}
}

// Resolve is the packet f names in lab name, by package request's node rule; the lab's pods and Services are read
// only when f names one (--service, --from pod/NAME).
func Resolve(ctx context.Context, p lab.Provider, name string, f request.Flags) (request.Packet, error) {
	if err := f.Check(); err != nil {
		return request.Packet{}, err
	}
	st, err := p.Status(ctx, name)
	if err != nil {
		return request.Packet{}, err
	}
	k := namesOf(st, nil, nil)
	if _, _, fromPod := lab.PodRef(f.From); fromPod || f.Service != "" {
		if k, err = kubernetesNames(ctx, p, name, st); err != nil {
			return request.Packet{}, err
		}
	}
	return f.InLab(name, k)
}

// namesMissing begins the Missing entry of a snapshot taken while the lab's apiserver did not answer.
const namesMissing = "Kubernetes names"

// NamesNote is what a trace of s says when s lacks the lab's Kubernetes names for want of its apiserver ("" when
// it has them): the walk is the kernel's and stands, only pods and Services are shown by address.
func NamesNote(s *snapshot.Snapshot) string {
	for _, m := range s.Missing {
		if why, ok := strings.CutPrefix(m, namesMissing+" "); ok {
			return "pods and Services are shown by address: " + strings.Trim(why, "()")
		}
	}
	return ""
}

// Snapshot runs the collector inside a lab node (this same binary, `k8sguide internal collect`) and adds
// the Kubernetes names the rules point at.
func Snapshot(ctx context.Context, p lab.Provider, name, node string) (*snapshot.Snapshot, error) {
	st, err := p.Status(ctx, name)
	if err != nil {
		return nil, err
	}
	if _, err := NodeOf(st, node); err != nil {
		return nil, err
	}
	return withNames(ctx, p, name, st, nil, nil, func() (*snapshot.Snapshot, error) {
		return collect(ctx, p, name, st, node, "")
	})
}

// withNames runs collect and adds the lab's Kubernetes names to its snapshot: k (or kerr) when the caller read
// them already, else read from the lab's apiserver while the collector runs (with thousands of Services, both
// take a while). The snapshot stands without them: it then says why they are missing.
func withNames(ctx context.Context, p lab.Provider, name string, st lab.Status, k *snapshot.Kubernetes, kerr error, collect func() (*snapshot.Snapshot, error)) (*snapshot.Snapshot, error) {
	names := make(chan struct{})
	if k == nil && kerr == nil {
		go func() {
			defer close(names)
			k, kerr = kubernetesNames(ctx, p, name, st)
		}()
	} else {
		close(names)
	}
	s, err := collect()
	<-names
	if err != nil {
		return nil, err
	}
	if kerr != nil {
		// The rules are the kernel's and need no apiserver: the trace goes on without the names, and says
		// why they are missing.
		var uerr *url.Error
		if errors.As(kerr, &uerr) {
			kerr = uerr.Err // the cause, not the request's method and URL
		}
		s.Missing = append(s.Missing, namesMissing+" ("+kerr.Error()+")")
		return s, nil
	}
	s.Kubernetes = k
	return s, nil
}

// Trace traces req's packet on a lab's node, reading only what its walk reaches (tracer.CollectFor): on a node
// with thousands of Services that is a fifth of the rules. Should the trace here, with the lab's names, reach a
// chain the collector's walk did not (the names differ from those it had), the node is read whole and traced
// again: the answer is never one a part of the rules made up. The snapshot is the one traced.
func Trace(ctx context.Context, p lab.Provider, name, node string, req tracer.Request) (*trace.Trace, *snapshot.Snapshot, error) {
	st, err := p.Status(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	if _, err := NodeOf(st, node); err != nil {
		return nil, nil, err
	}
	scope := tracer.ScopeRequest{Request: req, Kubernetes: namesOf(st, nil, nil)}
	var names *snapshot.Kubernetes
	var namesErr error
	if pod, ok := strings.CutPrefix(req.From, "pod/"); ok {
		// The walk starts at the pod's address: the collector needs it before it reads anything.
		if names, namesErr = kubernetesNames(ctx, p, name, st); namesErr == nil {
			for _, k := range names.Pods {
				if k.Name == pod || k.Namespace+"/"+k.Name == pod {
					scope.Kubernetes.Pods = append(scope.Kubernetes.Pods, k)
				}
			}
		}
	}
	forPacket, err := json.Marshal(scope)
	if err != nil {
		return nil, nil, err
	}
	s, err := withNames(ctx, p, name, st, names, namesErr, func() (*snapshot.Snapshot, error) {
		return collect(ctx, p, name, st, node, string(forPacket))
	})
	if err != nil {
		return nil, nil, err
	}
	op := tracer.Open(s)
	t, err := op.Trace(req)
	if err != nil || len(op.Unread()) == 0 {
		return t, s, err // an error is the request's (a pod the lab lacks), whatever was read
	}
	if s, err = Snapshot(ctx, p, name, node); err != nil {
		return nil, nil, err
	}
	t, err = tracer.Trace(s, req)
	return t, s, err
}

// collect runs the collector in node (one of st's) and reads its snapshot, without Kubernetes names; forPacket
// (tracer.ScopeRequest as JSON), when set, has it read only what that packet's walk reaches.
func collect(ctx context.Context, p lab.Provider, name string, st lab.Status, node, forPacket string) (*snapshot.Snapshot, error) {
	exe, err := p.ToolPath(ctx, name, node)
	if err != nil {
		return nil, err
	}
	out, err := nodecmd.Collect(ctx, execIn(p, name, node), exe, st.CiliumMaps(node), forPacket)
	if err != nil {
		return nil, fmt.Errorf("collecting %s: %w", node, err)
	}
	s, err := snapshot.Parse(out)
	if err != nil {
		return nil, fmt.Errorf("collecting %s: unreadable collector output: %v", node, err)
	}
	s.Node, s.Lab, s.Dataplane = node, name, st.Dataplane
	return s, nil
}

func kubernetesNames(ctx context.Context, p lab.Provider, name string, st lab.Status) (*snapshot.Kubernetes, error) {
	w, err := p.Workloads(ctx, name)
	if err != nil {
		return nil, err
	}
	pods, err := w.Pods(ctx)
	if err != nil {
		return nil, err
	}
	svcs, err := w.Services(ctx)
	if err != nil {
		return nil, err
	}
	return namesOf(st, pods, svcs), nil
}

// namesOf is what a snapshot knows of the lab's Kubernetes objects: nodes, pods with addresses, Services.
func namesOf(st lab.Status, pods []v1.Pod, svcs []v1.Service) *snapshot.Kubernetes {
	k := &snapshot.Kubernetes{ClientIP: st.Client}
	for _, n := range st.Nodes {
		k.Nodes = append(k.Nodes, snapshot.Node{Name: n.Name, IP: n.IP})
	}
	for _, pod := range pods {
		if pod.Status.PodIP == "" {
			continue
		}
		k.Pods = append(k.Pods, snapshot.Pod{Namespace: pod.Namespace, Name: pod.Name, IP: pod.Status.PodIP, Node: pod.Spec.NodeName})
	}
	for _, svc := range svcs {
		s := snapshot.Service{Namespace: svc.Namespace, Name: svc.Name, ClusterIP: svc.Spec.ClusterIP}
		for _, port := range svc.Spec.Ports {
			s.Ports = append(s.Ports, snapshot.ServicePort{Name: port.Name, Protocol: string(port.Protocol), Port: port.Port, NodePort: port.NodePort})
		}
		k.Services = append(k.Services, s)
	}
	return k
}

// execIn runs a node command in where (a node, a pod or the lab's client) of lab name.
func execIn(p lab.Provider, name, where string) nodecmd.Exec {
	return func(ctx context.Context, argv []string, streams lab.Streams) error {
		return p.Exec(ctx, name, where, argv, streams)
	}
}
