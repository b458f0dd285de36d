package main

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// How changes are batched and failures retried. Cilium's reconciler applies what accumulated since its last round
// and retries a failed one with a backoff (--lb-retry-backoff-min/max, 1 s to 1 min); a lab wants its changes in
// the maps sooner, so the backoff here is shorter.
const (
	// settleQuiet: a burst (a Service and its EndpointSlice, a rollout) is over when nothing arrived for this long.
	settleQuiet = 20 * time.Millisecond
	// settleMax bounds the wait, so that a steady stream of changes still gets applied.
	settleMax = 200 * time.Millisecond

	retryMin = 100 * time.Millisecond
	retryMax = 5 * time.Second
)

// newClient makes the apiserver's client from the node's kubeconfig (kube-proxy's: user system:kube-proxy, whose
// system:node-proxier binding lets it list and watch Services, EndpointSlices and Nodes).
func newClient(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.UserAgent = "k8sguide-cilium"
	return kubernetes.NewForConfig(cfg)
}

// cluster is the informers' view of the apiserver: what the Cilium agent watches for its load-balancer (Services,
// EndpointSlices, Nodes), held in shared informers' caches.
type cluster struct {
	services       corelisters.ServiceLister
	endpointSlices discoverylisters.EndpointSliceLister
	nodes          corelisters.NodeLister
	// changed holds at most one pending notification: a burst of events is one reason to rebuild, and the
	// rebuild reads the caches, never the events.
	changed chan struct{}
	synced  []cache.DoneChecker
}

// watch registers the informers and the event handlers; the informers run once the factory is started.
func watch(cs kubernetes.Interface) (informers.SharedInformerFactory, *cluster, error) {
	// No periodic resync: the maps are rebuilt from the caches after every change, and a resync would only
	// deliver the same objects again.
	factory := informers.NewSharedInformerFactory(cs, 0)
	services := factory.Core().V1().Services()
	endpointSlices := factory.Discovery().V1().EndpointSlices()
	nodes := factory.Core().V1().Nodes()
	c := &cluster{
		services:       services.Lister(),
		endpointSlices: endpointSlices.Lister(),
		nodes:          nodes.Lister(),
		changed:        make(chan struct{}, 1),
	}
	always := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.notify() },
		UpdateFunc: func(any, any) { c.notify() },
		DeleteFunc: func(any) { c.notify() },
	}
	// Of a Node only its name and InternalIP go into the state: its status, which the node's agent and the
	// controllers keep updating, changes nothing here.
	nodeChanges := cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { c.notify() },
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*v1.Node)
			n, ok2 := newObj.(*v1.Node)
			if !ok1 || !ok2 || internalIPv4(o) != internalIPv4(n) {
				c.notify()
			}
		},
		DeleteFunc: func(any) { c.notify() },
	}
	for _, h := range []struct {
		informer cache.SharedIndexInformer
		handler  cache.ResourceEventHandler
	}{{services.Informer(), always}, {endpointSlices.Informer(), always}, {nodes.Informer(), nodeChanges}} {
		reg, err := h.informer.AddEventHandler(h.handler)
		if err != nil {
			return nil, nil, err
		}
		// The registration's checker, not the informer's: it is done once the handler has also been handed
		// every object of the initial list, so that no event of it arrives after the first apply.
		c.synced = append(c.synced, reg.HasSyncedChecker())
	}
	return factory, c, nil
}

func (c *cluster) notify() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// drain forgets a pending notification: the state read after it includes that change.
func (c *cluster) drain() {
	select {
	case <-c.changed:
	default:
	}
}

// settle waits, after a first change, until the burst it belongs to is over: no change for settleQuiet, or
// settleMax in all. It returns false when ctx ends.
func (c *cluster) settle(ctx context.Context) bool {
	limit := time.NewTimer(settleMax)
	defer limit.Stop()
	quiet := time.NewTimer(settleQuiet)
	defer quiet.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-c.changed:
			quiet.Reset(settleQuiet)
		case <-quiet.C:
			return true
		case <-limit.C:
			return true
		}
	}
}

// state is a snapshot of the caches, sorted by namespace and name: the order in which new frontends and backends
// get their ids then does not depend on the order of a cache's map.
func (c *cluster) state() (*clusterState, error) {
	st := &clusterState{}
	var err error
	if st.Services, err = c.services.List(labels.Everything()); err != nil {
		return nil, err
	}
	if st.EndpointSlices, err = c.endpointSlices.List(labels.Everything()); err != nil {
		return nil, err
	}
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	slices.SortFunc(st.Services, func(a, b *v1.Service) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	slices.SortFunc(st.EndpointSlices, func(a, b *discoveryv1.EndpointSlice) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	for _, n := range nodes {
		// A node that has not reported an IPv4 InternalIP yet has no address a frontend or backend could use.
		if ip := internalIPv4(n); ip.IsValid() {
			st.Nodes = append(st.Nodes, clusterNode{Name: n.Name, IP: ip})
		}
	}
	slices.SortFunc(st.Nodes, func(a, b clusterNode) int { return cmp.Compare(a.Name, b.Name) })
	return st, nil
}

// internalIPv4 is a Node's first IPv4 InternalIP, as the node's agent reports it; the zero Addr if it has none.
func internalIPv4(n *v1.Node) netip.Addr {
	for _, a := range n.Status.Addresses {
		if a.Type != v1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Is4() {
			return ip
		}
	}
	return netip.Addr{}
}

// follow keeps the maps equal to the cluster until ctx ends: it waits for the informers' caches, applies them,
// then applies again after every burst of changes. A failed apply is logged and retried with a growing backoff,
// from the caches as they are then: nothing is lost, since apply writes the whole difference each time.
func (w *writer) follow(ctx context.Context, cs kubernetes.Interface) error {
	factory, c, err := watch(cs)
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	// Shutdown waits for the informers' goroutines, which stop with ctx.
	defer factory.Shutdown()
	w.logger.Info("waiting for the informers' caches", "kubeconfig", w.o.kubeconfig)
	if !cache.WaitFor(ctx, "", c.synced...) {
		return nil
	}
	w.logger.Info("caches synced")

	c.rounds(ctx, true, func() error {
		st, err := c.state()
		var took time.Duration
		if err == nil {
			start := time.Now()
			err = w.apply(st)
			took = time.Since(start)
		}
		if err != nil {
			w.logger.Error("apply failed", "err", err)
			return err
		}
		w.logger.Info("applied", "services", len(st.Services), "frontends", len(w.written.revNat), "nodes", len(st.Nodes), "sync", took)
		return nil
	})
	return nil
}

// rounds runs round (at once when first is true), then again after every burst of changes, until ctx ends. A
// failed round is tried again after a growing backoff (retryMin to retryMax), from the caches as they are then.
func (c *cluster) rounds(ctx context.Context, first bool, round func() error) {
	retry := time.Duration(0) // 0: the last round succeeded
	for {
		switch {
		case retry > 0:
			select {
			case <-ctx.Done():
				return
			case <-time.After(retry):
			}
		case !first:
			select {
			case <-ctx.Done():
				return
			case <-c.changed:
			}
			if !c.settle(ctx) {
				return
			}
		}
		first = false
		c.drain()
		if err := round(); err != nil {
			retry = min(max(2*retry, retryMin), retryMax)
			continue
		}
		retry = 0
	}
}
