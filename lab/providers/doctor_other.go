//go:build !linux

package providers

import (
	"context"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/lab/doctor"
	"github.com/k8sguide/k8sguide/lab/netns"
)

func netnsDoctor(context.Context, []dataplanes.Name, bool) []doctor.Check {
	_, err := netns.New()
	return []doctor.Check{{For: netns.ProviderName, Name: "Linux", Status: doctor.Fail, Found: err.Error()}}
}
