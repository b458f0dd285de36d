package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	cmtypes "github.com/cilium/cilium/pkg/clustermesh/types"
	"github.com/cilium/cilium/pkg/loadbalancer"
	"github.com/cilium/cilium/pkg/loadbalancer/maps"
	"github.com/cilium/cilium/pkg/maglev"
	"github.com/cilium/cilium/pkg/u8proto"
	"github.com/cilium/ebpf"
	"github.com/cilium/hive/cell"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// clusterState is what a node's proxy reads of the cluster, a snapshot of the informers' caches (see watch.go):
// the Services, their discovery.k8s.io/v1 EndpointSlices, and the nodes. The objects are the caches' own and must
// not be modified.
type clusterState struct {
	Nodes          []clusterNode
	Services       []*v1.Service
	EndpointSlices []*discoveryv1.EndpointSlice
}

// clusterNode is a Node as the proxy sees it: its name and its first IPv4 InternalIP (the lab is IPv4 only).
type clusterNode struct {
	Name string
	IP   netip.Addr
}

// frontend is one service map entry of Cilium's: an address the datapath load-balances, with its backends in
// slot order.
type frontend struct {
	addr     loadbalancer.L3n4Addr
	svcType  loadbalancer.SVCType
	extLocal bool
	intLocal bool
	affinity time.Duration // 0: no session affinity
	backends []loadbalancer.L3n4Addr
}

// desired is the complete content of the load-balancing maps for one state of the cluster, in network byte order.
type desired struct {
	services      map[maps.Service4Key]maps.Service4Value
	backends      map[maps.Backend4KeyV3]maps.Backend4ValueV3
	revNat        map[maps.RevNat4Key]maps.RevNat4Value
	affinityMatch map[maps.AffinityMatchKey]maps.AffinityMatchValue
	maglev        map[uint16][]loadbalancer.BackendID // rev-NAT id (host order) -> LUT
}

// writer keeps the node's load-balancing maps equal to the cluster's Services and EndpointSlices, as Cilium's
// BPF reconciler (pkg/loadbalancer/reconciler) does: stable service (rev-NAT) and backend ids, a master entry
// in slot 0 and one slot per backend, reverse NAT per frontend, affinity matches, Maglev tables.
type writer struct {
	logger *slog.Logger
	dp     *datapath
	o      options
	maglev *maglev.Maglev

	serviceIDs map[loadbalancer.L3n4Addr]loadbalancer.ServiceID
	backendIDs map[loadbalancer.L3n4Addr]loadbalancer.BackendID
	written    desired
}

func newWriter(logger *slog.Logger, dp *datapath, o options) (*writer, error) {
	// maglev.New wants a lifecycle to start its worker pool; a one-hook lifecycle of the hive library is the
	// smallest way to give it one.
	lc := cell.NewDefaultLifecycle(nil, 0, time.Minute)
	ml := maglev.New(dp.hashSeed, lc)
	if err := lc.Start(logger, context.Background()); err != nil {
		return nil, err
	}
	return &writer{logger: logger, dp: dp, o: o, maglev: ml,
		serviceIDs: map[loadbalancer.L3n4Addr]loadbalancer.ServiceID{},
		backendIDs: map[loadbalancer.L3n4Addr]loadbalancer.BackendID{},
		written:    emptyDesired()}, nil
}

func emptyDesired() desired {
	return desired{
		services:      map[maps.Service4Key]maps.Service4Value{},
		backends:      map[maps.Backend4KeyV3]maps.Backend4ValueV3{},
		revNat:        map[maps.RevNat4Key]maps.RevNat4Value{},
		affinityMatch: map[maps.AffinityMatchKey]maps.AffinityMatchValue{},
		maglev:        map[uint16][]loadbalancer.BackendID{},
	}
}

// frontends turns Services and EndpointSlices into Cilium frontends, as Cilium's Kubernetes reflector does for a
// kube-proxy replacement: a ClusterIP frontend per port; for NodePorts one per node address plus the
// 0.0.0.0 one the datapath falls back to; with externalTrafficPolicy Local the external-scope frontends keep
// only this node's backends and internal-scope twins keep them all.
func (w *writer) frontends(st *clusterState) []frontend {
	type portKey struct{ ns, svc, port string }
	ready := map[portKey][]struct {
		addr netip.Addr
		port int32
		node string
	}{}
	for _, es := range st.EndpointSlices {
		if es.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		svc := es.Labels[discoveryv1.LabelServiceName]
		for _, p := range es.Ports {
			if p.Port == nil {
				continue
			}
			name := ""
			if p.Name != nil {
				name = *p.Name
			}
			k := portKey{es.Namespace, svc, name}
			for _, ep := range es.Endpoints {
				if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
					continue
				}
				node := ""
				if ep.NodeName != nil {
					node = *ep.NodeName
				}
				for _, a := range ep.Addresses {
					if ip, err := netip.ParseAddr(a); err == nil {
						ready[k] = append(ready[k], struct {
							addr netip.Addr
							port int32
							node string
						}{ip, *p.Port, node})
					}
				}
			}
		}
	}
	var out []frontend
	for _, svc := range st.Services {
		clusterIP, err := netip.ParseAddr(svc.Spec.ClusterIP)
		if err != nil || !clusterIP.Is4() {
			continue // headless, or not IPv4
		}
		for _, sp := range svc.Spec.Ports {
			l4 := loadbalancer.TCP
			switch sp.Protocol {
			case v1.ProtocolUDP:
				l4 = loadbalancer.UDP
			case v1.ProtocolSCTP:
				l4 = loadbalancer.SCTP
			}
			var all, local []loadbalancer.L3n4Addr
			for _, e := range ready[portKey{svc.Namespace, svc.Name, sp.Name}] {
				be := loadbalancer.NewL3n4Addr(l4, cmtypes.AddrClusterFrom(e.addr, 0), uint16(e.port), loadbalancer.ScopeExternal)
				all = append(all, be)
				if e.node == w.o.node {
					local = append(local, be)
				}
			}
			sortAddrs(all)
			sortAddrs(local)
			var affinity time.Duration
			if svc.Spec.SessionAffinity == v1.ServiceAffinityClientIP {
				affinity = 10800 * time.Second
				if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
					affinity = time.Duration(*c.ClientIP.TimeoutSeconds) * time.Second
				}
			}
			intLocal := svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == v1.ServiceInternalTrafficPolicyLocal
			extLocal := svc.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal
			add := func(ip netip.Addr, port uint16, t loadbalancer.SVCType, scope uint8, bes []loadbalancer.L3n4Addr) {
				out = append(out, frontend{
					addr:     loadbalancer.NewL3n4Addr(l4, cmtypes.AddrClusterFrom(ip, 0), port, scope),
					svcType:  t,
					extLocal: extLocal,
					intLocal: intLocal,
					affinity: affinity,
					backends: bes,
				})
			}
			clusterBackends := all
			if intLocal {
				clusterBackends = local
			}
			add(clusterIP, uint16(sp.Port), loadbalancer.SVCTypeClusterIP, loadbalancer.ScopeExternal, clusterBackends)
			if sp.NodePort == 0 || (svc.Spec.Type != v1.ServiceTypeNodePort && svc.Spec.Type != v1.ServiceTypeLoadBalancer) {
				continue
			}
			extBackends := all
			if extLocal {
				extBackends = local
			}
			for _, ip := range []netip.Addr{netip.IPv4Unspecified(), w.o.nodeIP} {
				add(ip, uint16(sp.NodePort), loadbalancer.SVCTypeNodePort, loadbalancer.ScopeExternal, extBackends)
				if extLocal != intLocal {
					add(ip, uint16(sp.NodePort), loadbalancer.SVCTypeNodePort, loadbalancer.ScopeInternal, clusterBackends)
				}
			}
		}
	}
	return out
}

func sortAddrs(a []loadbalancer.L3n4Addr) {
	slices.SortFunc(a, func(x, y loadbalancer.L3n4Addr) int {
		if c := x.AddrCluster().Addr().Compare(y.AddrCluster().Addr()); c != 0 {
			return c
		}
		return cmp.Compare(x.Port(), y.Port())
	})
}

func (w *writer) serviceID(a loadbalancer.L3n4Addr) loadbalancer.ServiceID {
	if id, ok := w.serviceIDs[a]; ok {
		return id
	}
	id := loadbalancer.ServiceID(len(w.serviceIDs) + 1)
	w.serviceIDs[a] = id
	return id
}

func (w *writer) backendID(a loadbalancer.L3n4Addr) loadbalancer.BackendID {
	if id, ok := w.backendIDs[a]; ok {
		return id
	}
	id := loadbalancer.BackendID(len(w.backendIDs) + 1)
	w.backendIDs[a] = id
	return id
}

// build computes every map entry for a state of the cluster, as BPFOps.updateFrontend writes them.
func (w *writer) build(st *clusterState) (desired, error) {
	d := emptyDesired()
	for _, fe := range w.frontends(st) {
		feID := w.serviceID(fe.addr)
		proto, err := u8proto.ParseProtocol(fe.addr.Protocol())
		if err != nil {
			return d, err
		}
		ip := fe.addr.AddrCluster().AsNetIP()
		key := maps.NewService4Key(ip, fe.addr.Port(), proto, fe.addr.Scope(), 0)
		isRoutable := !key.IsSurrogate() && fe.svcType != loadbalancer.SVCTypeClusterIP
		flag := loadbalancer.NewSvcFlag(&loadbalancer.SvcFlagParam{
			SvcType:         fe.svcType,
			SvcExtLocal:     fe.extLocal,
			SvcIntLocal:     fe.intLocal,
			SessionAffinity: fe.affinity > 0,
			IsRoutable:      isRoutable,
		})
		val := &maps.Service4Value{}
		val.SetFlags(flag.UInt16())
		val.SetRevNat(int(feID))
		var ids []loadbalancer.BackendID
		for slot, be := range fe.backends {
			beID := w.backendID(be)
			ids = append(ids, beID)
			bv, err := maps.NewBackend4ValueV3(be.AddrCluster(), be.Port(), proto, loadbalancer.BackendStateActive, 0)
			if err != nil {
				return d, err
			}
			d.backends[*maps.NewBackend4KeyV3(beID)] = *bv.ToNetwork().(*maps.Backend4ValueV3)
			val.SetBackendID(beID)
			key.SetBackendSlot(slot + 1)
			d.services[*key.ToNetwork().(*maps.Service4Key)] = *val.ToNetwork().(*maps.Service4Value)
			if fe.affinity > 0 {
				d.affinityMatch[maps.AffinityMatchKey{BackendID: beID, RevNATID: byteorderHTON16(uint16(feID))}] = maps.AffinityMatchValue{}
			}
		}
		// The master entry: slot 0, the backend count, the algorithm (undefined: the node's default) and
		// the affinity timeout in the backend id's place.
		val.SetCount(len(fe.backends))
		val.SetQCount(0)
		key.SetBackendSlot(0)
		val.SetBackendID(0)
		val.SetLbAlg(loadbalancer.SVCLoadBalancingAlgorithmUndef)
		if fe.affinity > 0 {
			if err := val.SetSessionAffinityTimeoutSec(uint32(fe.affinity.Seconds())); err != nil {
				return d, err
			}
		}
		d.services[*key.ToNetwork().(*maps.Service4Key)] = *val.ToNetwork().(*maps.Service4Value)
		rk := maps.NewRevNat4Key(feID)
		d.revNat[*rk.ToNetwork().(*maps.RevNat4Key)] = *key.RevNatValue().ToNetwork().(*maps.RevNat4Value)
		// useMaglev: only frontends reachable from outside the node, never the 0.0.0.0 one.
		if w.o.lbAlgorithm == "maglev" && len(ids) > 0 && !fe.addr.AddrCluster().IsUnspecified() && fe.svcType != loadbalancer.SVCTypeClusterIP {
			d.maglev[uint16(feID)] = w.lookupTable(fe.backends, ids)
		}
	}
	return d, nil
}

func (w *writer) lookupTable(bes []loadbalancer.L3n4Addr, ids []loadbalancer.BackendID) []loadbalancer.BackendID {
	return w.maglev.GetLookupTable(func(yield func(maglev.BackendInfo) bool) {
		for i, be := range bes {
			if !yield(maglev.BackendInfo{ID: ids[i], Addr: be, Weight: loadbalancer.DefaultBackendWeight}) {
				return
			}
		}
	})
}

func byteorderHTON16(v uint16) uint16 { return v<<8 | v>>8 }

// apply writes the difference between what the maps hold and what the cluster's state wants: new and changed
// entries first (backends and tables before the slots that name them), then removals. Every write and removal is
// recorded in w.written as soon as it succeeds, so that after a failure w.written still says what the maps hold,
// and the retry (follow, in watch.go) writes and removes exactly what is left.
func (w *writer) apply(st *clusterState) error {
	d, err := w.build(st)
	if err != nil {
		return err
	}
	old := w.written
	if err := upsert(w.dp.backends, d.backends, old.backends); err != nil {
		return fmt.Errorf("backends: %w", err)
	}
	if err := upsert(w.dp.revNat, d.revNat, old.revNat); err != nil {
		return fmt.Errorf("reverse NAT: %w", err)
	}
	if err := upsert(w.dp.affinityMatch, d.affinityMatch, old.affinityMatch); err != nil {
		return fmt.Errorf("affinity match: %w", err)
	}
	for id, lut := range d.maglev {
		if slices.Equal(lut, old.maglev[id]) {
			continue
		}
		if err := w.writeMaglev(id, lut); err != nil {
			return fmt.Errorf("maglev table of %d: %w", id, err)
		}
		old.maglev[id] = lut
	}
	if err := upsert(w.dp.services, d.services, old.services); err != nil {
		return fmt.Errorf("services: %w", err)
	}
	// Removals run the other way: first the service entries, so that no lookup meets a slot whose table or
	// backend has gone.
	if err := remove(w.dp.services, d.services, old.services); err != nil {
		return err
	}
	for id := range old.maglev {
		if _, ok := d.maglev[id]; !ok {
			k := maps.MaglevOuterKey{RevNatID: id}.ToNetwork()
			if err := w.dp.maglevOuter.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return err
			}
			delete(old.maglev, id)
		}
	}
	if err := remove(w.dp.affinityMatch, d.affinityMatch, old.affinityMatch); err != nil {
		return err
	}
	if err := remove(w.dp.revNat, d.revNat, old.revNat); err != nil {
		return err
	}
	if err := remove(w.dp.backends, d.backends, old.backends); err != nil {
		return err
	}
	w.written = d
	return nil
}

// writeMaglev fills a fresh inner map with the table and swaps it in, as Cilium's LBMaps.UpdateMaglev does.
func (w *writer) writeMaglev(id uint16, lut []loadbalancer.BackendID) error {
	inner, err := ebpf.NewMap(w.dp.maglevInner)
	if err != nil {
		return err
	}
	defer inner.Close()
	if err := inner.Update(uint32(0), lut, ebpf.UpdateAny); err != nil {
		return err
	}
	k := maps.MaglevOuterKey{RevNatID: id}.ToNetwork()
	return w.dp.maglevOuter.Update(&k, inner, ebpf.UpdateAny)
}

func upsert[K comparable, V comparable](m *ebpf.Map, want, have map[K]V) error {
	for k, v := range want {
		if old, ok := have[k]; ok && old == v {
			continue
		}
		if err := m.Update(&k, &v, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("update %+v: %w", k, err)
		}
		have[k] = v
	}
	return nil
}

// remove deletes what have holds and want does not. An entry already gone counts as removed, as Cilium's LBMaps
// delete (SilentDelete): otherwise a retry would fail on it forever.
func remove[K comparable, V any](m *ebpf.Map, want, have map[K]V) error {
	for k := range have {
		if _, ok := want[k]; !ok {
			if err := m.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("delete %+v: %w", k, err)
			}
			delete(have, k)
		}
	}
	return nil
}
