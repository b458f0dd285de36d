package live

import (
	"context"
	"fmt"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/lab"
)

// Connections makes n connections to dst (IP:PORT) from a place of the lab: the client (from "" or "client"),
// node (from "node") or a pod (from "pod/NAME" or "pod/NAMESPACE/NAME"), each from a new source port, parallel at
// a time (1: one after another, as a client whose next connection follows what the node remembers of the last,
// such as session affinity), and says what each did, in order.
func Connections(ctx context.Context, p lab.Provider, name, from, node, dst string, n, parallel int) ([]trace.Connection, error) {
	if _, err := trace.ParseDst(dst); err != nil {
		return nil, fmt.Errorf("%v", err)
	}
	where, err := placeOf(name, from, node)
	if err != nil {
		return nil, err
	}
	out := make([]trace.Connection, n)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(parallel, 1))
	for i := range n {
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			out[i] = connect(gctx, p, name, where, dst, 0)
			return nil
		})
	}
	return out, g.Wait()
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
