package providers

import (
	"context"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/lab/doctor"
	"github.com/k8sguide/k8sguide/lab/netns"
)

func netnsDoctor(ctx context.Context, ds []dataplanes.Name, probe bool) []doctor.Check {
	p, err := netns.New()
	if err != nil {
		return []doctor.Check{{For: netns.ProviderName, Name: "k8sguide", Status: doctor.Fail, Found: err.Error()}}
	}
	return p.Doctor(ctx, ds, probe)
}
