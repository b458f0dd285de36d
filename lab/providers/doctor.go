package providers

import (
	"context"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/lab/doctor"
	"github.com/k8sguide/k8sguide/lab/kind"
)

// Doctor checks what labs of provider ("netns", "kind", or "all") and dataplanes ds need of this host. probe:
// also try the kernel (netns, as root: rules loaded in a namespace of their own).
func Doctor(ctx context.Context, provider string, ds []dataplanes.Name, probe bool) doctor.Report {
	var r doctor.Report
	if provider == "netns" || provider == "all" {
		r.Checks = append(r.Checks, netnsDoctor(ctx, ds, probe)...)
	}
	if provider == "kind" || provider == "all" {
		r.Checks = append(r.Checks, kind.Doctor(ctx)...)
	}
	return r
}
