package netns

import (
	"context"
	"time"

	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/workload"
)

// podRollout bounds the wait for a Deployment's pods: nothing is pulled, so a minute is plenty, even under
// emulation.
const podRollout = 2 * time.Minute

// Workloads gives the lab's objects through its apiserver, with the same client code as the kind provider.
func (p *Provider) Workloads(ctx context.Context, name string) (lab.Workloads, error) {
	if _, err := p.Store.View(name); err != nil {
		return nil, err
	}
	cs, err := p.clientset(name)
	if err != nil {
		return nil, err
	}
	return workload.ClientOfLab(cs, podRollout, 50*time.Millisecond, func() map[string]string { return p.downForGood(name) }), nil
}

// downForGood names the lab's nodes whose init is gone (initsGone).
func (p *Provider) downForGood(name string) map[string]string {
	st, err := p.Store.View(name)
	if err != nil {
		return nil
	}
	return initsGone(st)
}
