//go:build !linux

package snapshot

import (
	"context"

	"github.com/k8sguide/k8sguide/dataplanes"
)

// Collect runs inside a lab's (Linux) node; on any other system there is no node to read.
func Collect(context.Context, string) (*Snapshot, error) {
	return nil, dataplanes.NeedsLinux("collecting a node's snapshot")
}

// CollectScoped runs inside a lab's (Linux) node, as Collect does.
func CollectScoped(context.Context, string, map[dataplanes.Name]*dataplanes.Scope) (*Snapshot, error) {
	return nil, dataplanes.NeedsLinux("collecting a node's snapshot")
}

// Recollect runs inside a lab's (Linux) node, as Collect does.
func (s *Snapshot) Recollect(context.Context, string, dataplanes.Name, *dataplanes.Scope) error {
	return dataplanes.NeedsLinux("collecting a node's snapshot")
}
