//go:build !linux

package nftables

import (
	"context"

	"github.com/k8sguide/k8sguide/dataplanes"
)

// Collect needs the kernel's nf_tables (over netlink and nft): only a Linux node has a ruleset to read.
func (Engine) Collect(context.Context, dataplanes.CollectOptions) (dataplanes.Part, error) {
	return dataplanes.Part{}, dataplanes.NeedsLinux("reading the nftables ruleset")
}
