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
