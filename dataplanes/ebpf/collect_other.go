//go:build !linux

package ebpf

import (
	"context"

	"github.com/k8sguide/k8sguide/dataplanes"
)

// Collect needs a Linux kernel's pinned BPF maps.
func (Engine) Collect(context.Context, dataplanes.CollectOptions) (dataplanes.Part, error) {
	return dataplanes.Part{}, dataplanes.NeedsLinux("reading the Cilium maps")
}

// Collect needs a Linux kernel's pinned BPF maps (`lb list --bpffs` on a Mac).
func Collect(string) (*State, error) { return nil, dataplanes.NeedsLinux("reading pinned Cilium maps") }
