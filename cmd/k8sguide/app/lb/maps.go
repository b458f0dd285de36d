package lb

import (
	"context"
	"fmt"
	"io"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/ebpf"
	"github.com/k8sguide/k8sguide/inspect/live"
	"github.com/k8sguide/k8sguide/inspect/snapshot"
	"github.com/k8sguide/k8sguide/inspect/tracer"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/providers"
)

// mapsSource says where `lb list` reads Cilium's maps: a pinned directory on this machine, a saved snapshot (-
// for in), or a lab node (the first when node is "").
type mapsSource struct {
	bpffs, snapshot string
	in              io.Reader
	lab, node       string
}

// ciliumMaps reads an ebpf node's Cilium maps from src.
func ciliumMaps(ctx context.Context, src mapsSource) (*ebpf.State, error) {
	if src.snapshot != "" && src.bpffs != "" {
		return nil, fmt.Errorf("--snapshot and --bpffs are two different sources: give one")
	}
	switch {
	case src.bpffs != "":
		return ebpf.Collect(src.bpffs)
	case src.snapshot != "":
		s, err := tracer.LoadFile(src.snapshot, src.in, nil)
		if err != nil {
			return nil, err
		}
		return ciliumMapsOf(s, src.snapshot)
	}
	p, err := providers.ForLabFlag(&src.lab, src.lab != "")
	if err != nil {
		return nil, err
	}
	status, err := p.Status(ctx, src.lab)
	if err != nil {
		return nil, err
	}
	if len(status.Nodes) == 0 {
		return nil, &lab.NotFoundError{Kind: "node", Name: "(any)"}
	}
	node := status.Nodes[0].Name
	if src.node != "" {
		// As node-ip prints it (worker2) or whole.
		if node, err = lab.ResolveNode(status.NodeNames(), src.lab, src.node); err != nil {
			return nil, err
		}
	}
	s, err := live.Snapshot(ctx, p, src.lab, node)
	if err != nil {
		return nil, err
	}
	return ciliumMapsOf(s, node)
}

func ciliumMapsOf(s *snapshot.Snapshot, where string) (*ebpf.State, error) {
	part := s.Part(dataplanes.EBPF)
	if part == nil {
		dp := string(s.Dataplane)
		if dp == "" {
			dp = "not Cilium"
		}
		return nil, fmt.Errorf("%s has no Cilium maps (dataplane: %s)", where, dp)
	}
	return ebpf.Decode(part)
}
