//go:build linux

// Package kubeproxy runs an upstream kube-proxy proxier (iptables, nftables or ipvs) as a node's Service proxy. Instead
// of an apiserver watch it is handed the lab's Services and EndpointSlices; it turns each new set into the same
// OnXxxAdd/Update/Delete calls kube-proxy's informers would make. It is the only package of k8sguide that links
// k8s.io/kubernetes/pkg/proxy's proxiers, and it builds on Linux only, as they do.
package kubeproxy

import (
	"context"
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/kubernetes/pkg/proxy"

	"github.com/k8sguide/k8sguide/dataplanes/ipvs"
)

// Check tells whether a kube-proxy mode (--proxy-mode, a dataplane's Lab().KubeProxyMode) can run in the netns
// lab on this machine.
func Check(mode string) error {
	switch mode {
	case "iptables", "nftables":
		return nil
	case "ipvs":
		if err := ipvs.CheckKernel(); err != nil {
			return fmt.Errorf("kube-proxy's ipvs mode: %w", err)
		}
		return nil
	case "":
		return fmt.Errorf("no kube-proxy mode: the dataplane's own agent replaces kube-proxy")
	}
	return fmt.Errorf("unknown kube-proxy mode %q", mode)
}

func newProxier(ctx context.Context, mode string, cfg NodeConfig) (proxy.Provider, error) {
	if err := Check(mode); err != nil {
		return nil, err
	}
	switch mode {
	case "iptables":
		return newIPTablesProxier(ctx, cfg)
	case "ipvs":
		return newIPVSProxier(ctx, cfg)
	default:
		return newNFTablesProxier(ctx, cfg)
	}
}

// Proxy is one node's running proxier and the objects it was last given.
type Proxy struct {
	provider proxy.Provider

	mu       sync.Mutex
	started  bool
	services map[string]*v1.Service
	slices   map[string]*discoveryv1.EndpointSlice
}

// New builds the proxier of a kube-proxy mode for a node. nodeLabels go to OnTopologyChange, as kube-proxy passes the
// labels of its Node.
func New(ctx context.Context, mode string, cfg NodeConfig, nodeLabels map[string]string) (*Proxy, error) {
	p, err := newProxier(ctx, mode, cfg)
	if err != nil {
		return nil, err
	}
	p.OnTopologyChange(nodeLabels)
	return &Proxy{provider: p, services: map[string]*v1.Service{}, slices: map[string]*discoveryv1.EndpointSlice{}}, nil
}

// Apply hands the proxier a complete new set of Services and EndpointSlices and returns once the rules that
// reflect it are in the kernel.
func (p *Proxy) Apply(services []v1.Service, slices []discoveryv1.EndpointSlice) {
	p.mu.Lock()
	defer p.mu.Unlock()
	next := map[string]*v1.Service{}
	for i := range services {
		s := &services[i]
		key := s.Namespace + "/" + s.Name
		next[key] = s
		old, ok := p.services[key]
		switch {
		case !ok:
			p.provider.OnServiceAdd(s)
		case !apiequality.Semantic.DeepEqual(old, s):
			p.provider.OnServiceUpdate(old, s)
		}
	}
	for key, old := range p.services {
		if _, ok := next[key]; !ok {
			p.provider.OnServiceDelete(old)
		}
	}
	p.services = next

	nextSlices := map[string]*discoveryv1.EndpointSlice{}
	for i := range slices {
		s := &slices[i]
		key := s.Namespace + "/" + s.Name
		nextSlices[key] = s
		old, ok := p.slices[key]
		switch {
		case !ok:
			p.provider.OnEndpointSliceAdd(s)
		case !apiequality.Semantic.DeepEqual(old, s):
			p.provider.OnEndpointSliceUpdate(old, s)
		}
	}
	for key, old := range p.slices {
		if _, ok := nextSlices[key]; !ok {
			p.provider.OnEndpointSliceDelete(old)
		}
	}
	p.slices = nextSlices

	if !p.started {
		// What kube-proxy does once its informers have synced; the second call runs the first full sync.
		p.provider.OnServiceSynced()
		p.started = true
	}
	// The proxiers' OnEndpointSlicesSynced runs syncProxyRules synchronously (kube-proxy calls it once, when its
	// informers have synced). Calling it after each change set makes "apply, then rules are in the kernel" hold
	// without guessing at SyncLoop's timing; the rules written are the same either way.
	p.provider.OnEndpointSlicesSynced()
}

// Run runs the proxier's sync loop (periodic resyncs and coalesced syncs) until the process ends.
func (p *Proxy) Run() { p.provider.SyncLoop() }
