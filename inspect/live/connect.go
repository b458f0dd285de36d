package live

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/request"
	"github.com/k8sguide/k8sguide/inspect/snapshot"
	"github.com/k8sguide/k8sguide/lab"
)

// Connections makes n connections to dst (IP:PORT) from a place of the lab: the client (from "" or "client"),
// node (from "node") or a pod (from "pod/NAME" or "pod/NAMESPACE/NAME"), each from a new source port, parallel at
// a time (1: one after another, as a client whose next connection follows what the node remembers of the last,
// such as session affinity), and says what each did, in order.
//
// An interruption (ctx ended) returns the connections made before it, in order, with ctx's error: the ones it cut
// short are not among them. Nothing is allocated by n, which the caller bounds.
func Connections(ctx context.Context, p lab.Provider, name, from, node, dst string, n, parallel int) ([]trace.Connection, error) {
	return connections(ctx, p, name, from, node, dst, n, parallel, nil)
}

// connections is Connections with, when sports is not nil, connection i made from source port sports[i].
func connections(ctx context.Context, p lab.Provider, name, from, node, dst string, n, parallel int, sports []uint16) ([]trace.Connection, error) {
	if err := (request.Flags{Dst: dst, From: from}).Check(); err != nil {
		return nil, err
	}
	if _, _, ok := lab.PodRef(from); ok {
		pod, err := PodOf(ctx, p, name, from)
		if err != nil {
			return nil, err
		}
		from = pod
	}
	where, err := placeOf(name, from, node)
	if err != nil {
		return nil, err
	}
	type made struct {
		i int
		c trace.Connection
	}
	var mu sync.Mutex
	var done []made
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(parallel, 1))
	for i := 0; i < n && gctx.Err() == nil; i++ {
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			sport := 0
			if sports != nil {
				sport = int(sports[i])
			}
			c := connect(gctx, p, name, where, dst, sport)
			if err := gctx.Err(); err != nil && c.Error != "" {
				return err // cut short by the interruption: not a connection that failed
			}
			mu.Lock()
			done = append(done, made{i, c})
			mu.Unlock()
			return nil
		})
	}
	err = g.Wait()
	if err == nil {
		err = ctx.Err()
	}
	slices.SortFunc(done, func(a, b made) int { return a.i - b.i })
	out := make([]trace.Connection, len(done))
	for k, m := range done {
		out[k] = m.c
	}
	return out, err
}

// PodOf is the pod --from pod/NAME names in the lab (request.PickPod: that pod, else one of the Deployment
// NAME), as pod/NAME (pod/NAMESPACE/NAME when from names the namespace): a connection from a pod that is not there would only fail, each one, and look like the
// network's answer.
func PodOf(ctx context.Context, p lab.Provider, name, from string) (string, error) {
	w, err := p.Workloads(ctx, name)
	if err != nil {
		return "", err
	}
	pods, err := w.Pods(ctx)
	if err != nil {
		return "", err
	}
	// Every pod, with an address or not yet: the error then names the pods there are.
	var all []snapshot.Pod
	for _, o := range pods {
		all = append(all, snapshot.Pod{Namespace: o.Namespace, Name: o.Name, IP: o.Status.PodIP, Node: o.Spec.NodeName})
	}
	pod, err := request.PickPod(all, from, "")
	if err != nil {
		return "", err
	}
	return request.PodFrom(from, pod), nil
}

// placeOf is the node, pod or client a packet from `from` starts in.
func placeOf(name, from, node string) (string, error) {
	switch {
	case from == "" || from == "client":
		return lab.ClientName(name), nil
	case from == "node":
		if node == "" {
			return "", fmt.Errorf("--from node needs --node")
		}
		return node, nil
	case strings.HasPrefix(from, "pod/"):
		pod := strings.TrimPrefix(from, "pod/")
		if i := strings.IndexByte(pod, '/'); i >= 0 {
			pod = pod[i+1:]
		}
		if pod == "" {
			return "", fmt.Errorf("--from pod/NAME: name the pod")
		}
		return pod, nil
	}
	return "", fmt.Errorf("--from %q: want client, node or pod/NAME", from)
}
