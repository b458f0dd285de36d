package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/cilium/cilium/pkg/bpf"
	"github.com/cilium/cilium/pkg/datapath/config"
	"github.com/cilium/cilium/pkg/mac"
	"github.com/cilium/cilium/pkg/maps/callsmap"
	"github.com/cilium/cilium/pkg/maps/lxcmap"
	"github.com/cilium/cilium/pkg/maps/policymap"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// The node's pod endpoints, as Cilium's agent makes them when its CNI plugin adds a pod (pkg/endpoint, and the
// loader's reloadEndpoint): for each pod of this node that has its address, bpf_lxc loaded with the endpoint's
// load-time constants (id, address, identity, the host-side veth's ifindex and MAC), its per-endpoint tail-call
// and policy maps, its policy programs in cilium_call_policy and cilium_egresscall_policy at its id,
// cil_from_container attached with tcx to the host-side veth, and its entry in cilium_lxc, which is how bpf_host
// and every bpf_lxc of the node know the address is a local endpoint. Cilium learns of a pod from its CNI plugin;
// here the agent watches the node's pods, as the lab's kubelet wires them before it reports their address.

// firstPodEndpointID is the lowest id a pod endpoint gets; ids below are the host's.
const firstPodEndpointID = 2

// maxEndpointID is Cilium's: endpoint ids are 16 bits and kept below 4096.
const maxEndpointID = 4095

// lxcObjects is what the loader takes from bpf_lxc (pkg/datapath/loader lxcObjects).
type lxcObjects struct {
	FromContainer    *ebpf.Program `ebpf:"cil_from_container"`
	PolicyProg       *ebpf.Program `ebpf:"cil_lxc_policy"`
	PolicyMap        *ebpf.Map     `ebpf:"cilium_call_policy"`
	EgressPolicyProg *ebpf.Program `ebpf:"cil_lxc_policy_egress"`
	EgressPolicyMap  *ebpf.Map     `ebpf:"cilium_egresscall_policy"`
}

// endpoint is one pod's endpoint on this node.
type endpoint struct {
	id       uint16
	uid      types.UID
	pod      string // namespace/name
	ip       netip.Addr
	ifname   string // the host-side veth
	ifindex  int
	identity uint32
}

// attached tells whether the endpoint's veth is still the one its program was attached to: a kubelet that
// restarts makes its pods' sandboxes again, with new veths of the same name.
func (ep *endpoint) attached() bool {
	l, err := netlink.LinkByIndex(ep.ifindex)
	return err == nil && l.Attrs().Name == ep.ifname
}

// endpointManager keeps the node's endpoints equal to its running pods.
type endpointManager struct {
	logger *slog.Logger
	dp     *datapath
	o      options
	spec   *ebpf.CollectionSpec
	eps    map[types.UID]*endpoint
}

func newEndpointManager(logger *slog.Logger, dp *datapath, o options) (*endpointManager, error) {
	spec, err := ebpf.LoadCollectionSpec(o.lxcObject)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", o.lxcObject, err)
	}
	if _, ok := spec.Programs["cil_from_container"]; !ok {
		return nil, fmt.Errorf("%s has no cil_from_container: was it compiled from Cilium's bpf_lxc.c?", o.lxcObject)
	}
	m := &endpointManager{logger: logger.With("controller", "endpoints"), dp: dp, o: o, spec: spec, eps: map[types.UID]*endpoint{}}
	// What an earlier run of the agent left (it does not remember its ids): its endpoints are made again.
	if err := m.forgetAll(); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *endpointManager) endpointsDir() string { return filepath.Join(m.o.bpffs, "endpoints") }

// forgetAll removes every pod endpoint's pins and its cilium_lxc entry (the host's entries stay).
func (m *endpointManager) forgetAll() error {
	var key lxcmap.EndpointKey
	var info lxcmap.EndpointInfo
	var stale []lxcmap.EndpointKey
	it := m.dp.endpoints.Iterate()
	for it.Next(&key, &info) {
		if info.Flags&lxcmap.EndpointFlagHost == 0 {
			stale = append(stale, key)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("listing cilium_lxc: %w", err)
	}
	for _, k := range stale {
		if err := m.dp.endpoints.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	entries, err := os.ReadDir(m.endpointsDir())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, e := range entries {
		if id, err := strconv.ParseUint(e.Name(), 10, 16); err == nil {
			m.unpin(uint16(id))
		}
	}
	return nil
}

// follow watches the node's pods (as the kubelet does, by field selector) and reconciles after every burst of
// changes until ctx ends; a failed round is retried with a backoff.
func (m *endpointManager) follow(ctx context.Context, cs kubernetes.Interface) error {
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
		lo.FieldSelector = "spec.nodeName=" + m.o.node
	}))
	pods := factory.Core().V1().Pods()
	c := &cluster{changed: make(chan struct{}, 1)}
	reg, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.notify() },
		UpdateFunc: func(any, any) { c.notify() },
		DeleteFunc: func(any) { c.notify() },
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitFor(ctx, "", reg.HasSyncedChecker()) {
		return nil
	}
	lister := pods.Lister()
	// The initial list's events have notified c already: the first round waits for them, not at once.
	c.rounds(ctx, false, func() error {
		all, err := lister.List(labels.Everything())
		if err == nil {
			err = m.reconcile(all)
		}
		if err != nil {
			m.logger.Error("endpoints not reconciled", "err", err)
		}
		return err
	})
	return nil
}

// reconcile makes an endpoint for every pod of the node that has an address and a sandbox, and removes the
// endpoints of pods that are gone. A pod whose sandbox is not there (yet, or any more) is skipped.
func (m *endpointManager) reconcile(pods []*v1.Pod) error {
	want := map[types.UID]*v1.Pod{}
	for _, p := range pods {
		ip, err := netip.ParseAddr(p.Status.PodIP)
		if p.Spec.HostNetwork || err != nil || !m.o.podCIDR.Contains(ip) {
			continue
		}
		want[p.UID] = p
	}
	var errs []error
	for uid, ep := range m.eps {
		p, ok := want[uid]
		if ok && p.Status.PodIP == ep.ip.String() && (p.DeletionTimestamp != nil || ep.attached()) {
			continue
		}
		m.remove(ep)
	}
	uids := slices.SortedFunc(maps.Keys(want), func(a, b types.UID) int { return cmp.Compare(a, b) })
	for _, uid := range uids {
		if _, ok := m.eps[uid]; ok {
			continue
		}
		if err := m.add(want[uid]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// nextID is the lowest free endpoint id.
func (m *endpointManager) nextID() (uint16, error) {
	used := map[uint16]bool{}
	for _, ep := range m.eps {
		used[ep.id] = true
	}
	for id := uint16(firstPodEndpointID); id <= maxEndpointID; id++ {
		if !used[id] {
			return id, nil
		}
	}
	return 0, errors.New("no endpoint id left")
}

// podIdentity is the pod's security identity. Cilium allocates one per set of the pod's security-relevant labels
// (its namespace and labels) from 256 up, shared by the cluster through its identity CRDs; the lab derives it from
// the same labels, so every node agrees without a shared allocator.
func podIdentity(p *v1.Pod) uint32 {
	h := fnv.New32a()
	fmt.Fprintf(h, "k8s:io.kubernetes.pod.namespace=%s\n", p.Namespace)
	for _, k := range slices.Sorted(maps.Keys(p.Labels)) {
		if k == "pod-template-hash" { // not a security label for Cilium either
			continue
		}
		fmt.Fprintf(h, "k8s:%s=%s\n", k, p.Labels[k])
	}
	return 256 + h.Sum32()%(65535-256)
}

// sandbox finds the pod's eth0 (in its namespace) and its host-side peer (in the node's).
func (m *endpointManager) sandbox(p *v1.Pod) (podMAC net.HardwareAddr, host netlink.Link, err error) {
	ns, err := netns.GetFromPath(filepath.Join("/run/netns", m.o.podNetnsPrefix+string(p.UID)))
	if err != nil {
		return nil, nil, err
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, nil, err
	}
	defer h.Close()
	eth0, err := h.LinkByName("eth0")
	if err != nil {
		return nil, nil, fmt.Errorf("the pod's eth0: %w", err)
	}
	// A veth's IFLA_LINK is its peer's ifindex, in the peer's namespace: the node's.
	host, err = netlink.LinkByIndex(eth0.Attrs().ParentIndex)
	if err != nil {
		return nil, nil, fmt.Errorf("the host side of the pod's eth0 (ifindex %d): %w", eth0.Attrs().ParentIndex, err)
	}
	return eth0.Attrs().HardwareAddr, host, nil
}

// add makes the pod's endpoint.
func (m *endpointManager) add(p *v1.Pod) error {
	podMAC, host, err := m.sandbox(p)
	if err != nil {
		if p.DeletionTimestamp != nil {
			return nil // going: its sandbox may be gone already
		}
		// Not there yet (or again, after the kubelet's restart): tried again with the reconcile's backoff.
		return fmt.Errorf("pod %s/%s has no sandbox: %w", p.Namespace, p.Name, err)
	}
	id, err := m.nextID()
	if err != nil {
		return err
	}
	ep := &endpoint{id: id, uid: p.UID, pod: p.Namespace + "/" + p.Name, ip: netip.MustParseAddr(p.Status.PodIP),
		ifname: host.Attrs().Name, ifindex: host.Attrs().Index, identity: podIdentity(p)}
	if err := m.load(ep, host, podMAC); err != nil {
		m.unpin(id)
		return fmt.Errorf("endpoint %d for %s: %w", id, ep.pod, err)
	}
	m.eps[p.UID] = ep
	m.logger.Info("endpoint ready", "pod", ep.pod, "id", id, "ip", ep.ip, "interface", ep.ifname, "identity", ep.identity)
	return nil
}

// load is the loader's reloadEndpoint for one pod, then the agent's cilium_lxc entry for it.
func (m *endpointManager) load(ep *endpoint, host netlink.Link, podMAC net.HardwareAddr) error {
	cfg := config.NewBPFLXC(m.dp.node)
	cfg.EndpointIPv4.Addr = ep.ip.As4()
	copy(cfg.InterfaceMAC.Addr[:], host.Attrs().HardwareAddr)
	cfg.InterfaceIfIndex = uint32(host.Attrs().Index)
	cfg.DeviceMTU = uint16(host.Attrs().MTU)
	cfg.EndpointID = ep.id
	cfg.SecurityLabel = ep.identity
	cfg.HostEPID = hostEndpointID
	cfg.EnableNoServiceEndpointsRoutable = true
	cfg.EphemeralMin = 32768
	// A veth is a layer-2 device: bpf_lxc answers the pod's ARP for its gateway (cilium_host's address) with
	// the host-side MAC, as config.Endpoint sets for a layer-2 datapath.
	cfg.EnableARPResponder = true

	policyMap := bpf.LocalMapName(policymap.MapName, ep.id)
	var objs lxcObjects
	commit, err := bpf.LoadAndAssign(m.logger, &objs, m.spec, &bpf.CollectionOptions{
		CollectionOptions: ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: globalsDir(m.o.bpffs)}},
		Constants:         cfg,
		MapRenames: []map[string]string{{
			"cilium_calls":  bpf.LocalMapName(callsmap.MapName, ep.id),
			"cilium_policy": policyMap,
		}},
	})
	if err != nil {
		return fmt.Errorf("loading bpf_lxc: %w", err)
	}
	defer closeAll(objs.FromContainer, objs.PolicyProg, objs.PolicyMap, objs.EgressPolicyProg, objs.EgressPolicyMap)
	if err := commit(); err != nil {
		return fmt.Errorf("committing bpf pins: %w", err)
	}
	if err := allowAll(filepath.Join(globalsDir(m.o.bpffs), policyMap)); err != nil {
		return err
	}
	// The policy programs before the entry point, as the loader orders it: bpf_host may tail-call them as soon
	// as the endpoint is reachable.
	if err := objs.PolicyMap.Update(uint32(ep.id), objs.PolicyProg, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("inserting the endpoint's policy program: %w", err)
	}
	if err := objs.EgressPolicyMap.Update(uint32(ep.id), objs.EgressPolicyProg, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("inserting the endpoint's egress policy program: %w", err)
	}
	links := filepath.Join(m.endpointsDir(), strconv.Itoa(int(ep.id)), "links")
	if err := os.MkdirAll(links, 0o755); err != nil {
		return err
	}
	l, err := link.AttachTCX(link.TCXOptions{Program: objs.FromContainer, Attach: ebpf.AttachTCXIngress, Interface: host.Attrs().Index, Anchor: link.Tail()})
	if err != nil {
		return fmt.Errorf("attaching cil_from_container to %s with tcx: %w", host.Attrs().Name, err)
	}
	defer l.Close()
	if err := l.Pin(filepath.Join(links, "cil_from_container")); err != nil {
		return fmt.Errorf("pinning the cil_from_container link of %s: %w", host.Attrs().Name, err)
	}
	podM, err := mac.MAC(podMAC).Uint64()
	if err != nil {
		return fmt.Errorf("the pod's MAC %s: %w", podMAC, err)
	}
	nodeM, err := mac.MAC(host.Attrs().HardwareAddr).Uint64()
	if err != nil {
		return fmt.Errorf("the host-side MAC %s: %w", host.Attrs().HardwareAddr, err)
	}
	key := lxcmap.EndpointKey{EndpointKey: bpf.NewEndpointKey(ep.ip, 0)}
	info := lxcmap.EndpointInfo{IfIndex: uint32(host.Attrs().Index), LxcID: ep.id, MAC: podM, NodeMAC: nodeM, SecID: ep.identity}
	if err := m.dp.endpoints.Put(&key, &info); err != nil {
		return fmt.Errorf("cilium_lxc entry: %w", err)
	}
	return nil
}

// remove takes the endpoint out of cilium_lxc first (no program sends to it after that), then its programs.
// The entry goes only if it is still this endpoint's: a new pod may have the address already (the kubelet frees
// an address when the old pod's sandbox goes, before the pod leaves the API).
func (m *endpointManager) remove(ep *endpoint) {
	key := lxcmap.EndpointKey{EndpointKey: bpf.NewEndpointKey(ep.ip, 0)}
	var info lxcmap.EndpointInfo
	if err := m.dp.endpoints.Lookup(&key, &info); err == nil && info.LxcID == ep.id {
		if err := m.dp.endpoints.Delete(&key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			m.logger.Error("removing the cilium_lxc entry", "pod", ep.pod, "err", err)
		}
	}
	m.unpin(ep.id)
	delete(m.eps, ep.uid)
	m.logger.Info("endpoint removed", "pod", ep.pod, "id", ep.id, "ip", ep.ip)
}

// unpin removes an endpoint id's policy programs from the call maps and its pins: its link (which detaches
// cil_from_container if the veth is still there) and its per-endpoint maps.
func (m *endpointManager) unpin(id uint16) {
	globals := globalsDir(m.o.bpffs)
	for _, name := range []string{policymap.PolicyCallMapName, policymap.PolicyEgressCallMapName} {
		if cm, err := ebpf.LoadPinnedMap(filepath.Join(globals, name), nil); err == nil {
			k := uint32(id)
			cm.Delete(&k)
			cm.Close()
		}
	}
	os.RemoveAll(filepath.Join(m.endpointsDir(), strconv.Itoa(int(id))))
	for _, name := range []string{bpf.LocalMapName(callsmap.MapName, id), bpf.LocalMapName(policymap.MapName, id)} {
		os.Remove(filepath.Join(globals, name))
	}
}
