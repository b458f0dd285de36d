package tracer

import (
	"context"
	"fmt"
	"io"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf"
	"github.com/k8sguide/k8sguide/inspect/snapshot"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/providers"
)

// MapsSource says where `lb list` reads Cilium's maps: a pinned directory on this machine, a saved snapshot
// (- for In), or a lab node (the first when Node is "").
type MapsSource struct {
	BPFFS, Snapshot string
	In              io.Reader
	Lab, Node       string
}

// CiliumMaps reads an ebpf node's Cilium maps from src.
func CiliumMaps(ctx context.Context, src MapsSource) (*ebpf.State, error) {
	if src.Snapshot != "" && src.BPFFS != "" {
		return nil, fmt.Errorf("--snapshot and --bpffs are two different sources: give one")
	}
	switch {
	case src.BPFFS != "":
		return ebpf.Collect(src.BPFFS)
	case src.Snapshot != "":
		s, err := LoadFile(src.Snapshot, src.In, nil)
		if err != nil {
			return nil, err
		}
		return ciliumMapsOf(s, src.Snapshot)
	}
	p, err := providers.ForLab(src.Lab)
	if err != nil {
		return nil, err
	}
	node := src.Node
	if node == "" {
		status, err := p.Status(ctx, src.Lab)
		if err != nil {
			return nil, err
		}
		if len(status.Nodes) == 0 {
			return nil, &lab.NotFoundError{Kind: "node", Name: "(any)"}
		}
		node = status.Nodes[0].Name
	}
	s, err := Snapshot(ctx, p, src.Lab, node)
	if err != nil {
		return nil, err
	}
	return ciliumMapsOf(s, node)
}

func ciliumMapsOf(s *snapshot.Snapshot, where string) (*ebpf.State, error) {
	if s.EBPF == nil {
		dp := s.Dataplane
		if dp == "" {
			dp = "not Cilium"
		}
		return nil, fmt.Errorf("%s has no Cilium maps (dataplane: %s)", where, dp)
	}
	return s.EBPF, nil
}
