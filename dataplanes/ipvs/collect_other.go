//go:build !linux

package ipvs

import (
	"context"

	"github.com/k8sguide/k8sguide/dataplanes"
)

// Collect needs the kernel's IPVS netlink family: only a Linux node has a table to read.
func (Engine) Collect(context.Context, dataplanes.CollectOptions) (dataplanes.Part, error) {
	return dataplanes.Part{}, dataplanes.NeedsLinux("reading the IPVS table")
}
