package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"

	"github.com/cilium/cilium/pkg/bpf"
	"github.com/cilium/cilium/pkg/datapath/config"
	"github.com/cilium/cilium/pkg/identity"
	"github.com/cilium/cilium/pkg/loadbalancer"
	"github.com/cilium/cilium/pkg/maglev"
	"github.com/cilium/cilium/pkg/maps/callsmap"
	"github.com/cilium/cilium/pkg/maps/lxcmap"
	"github.com/cilium/cilium/pkg/maps/policymap"
	policyTypes "github.com/cilium/cilium/pkg/policy/types"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
)

// netdevObjects are what the loader hands back for one device, as Cilium's loader asks for them
// (pkg/datapath/loader hostNetdevObjects).
type netdevObjects struct {
	FromNetdev *ebpf.Program `ebpf:"cil_from_netdev"`
	ToNetdev   *ebpf.Program `ebpf:"cil_to_netdev"`
}

// hostObjects are bpf_host's programs for cilium_host (the loader's hostObjects): the host endpoint's policy
// program goes into cilium_call_policy at the host endpoint's id.
type hostObjects struct {
	ToHost     *ebpf.Program `ebpf:"cil_to_host"`
	FromHost   *ebpf.Program `ebpf:"cil_from_host"`
	PolicyProg *ebpf.Program `ebpf:"cil_host_policy"`
	PolicyMap  *ebpf.Map     `ebpf:"cilium_call_policy"`
}

// hostNetObjects is bpf_host's program for cilium_net.
type hostNetObjects struct {
	ToHost *ebpf.Program `ebpf:"cil_to_host"`
}

// hostEndpointID is the host endpoint's id. Cilium allocates it like any endpoint's; the lab fixes it, and pod
// endpoints take ids from firstPodEndpointID up.
const hostEndpointID = 1

// serviceLoopbackIPv4 is the agent's default --ipv4-service-loopback-address: the source a pod's packet gets
// when its own Service sends it back to itself (hairpin).
var serviceLoopbackIPv4 = netip.MustParseAddr("169.254.42.1")

// datapath is a node's loaded bpf_host: its pinned maps, and the tcx links that keep the programs attached.
type datapath struct {
	services, backends, revNat, affinityMatch, maglevOuter, endpoints *ebpf.Map
	maglevInner                                                       *ebpf.MapSpec
	maglevTableSize                                                   uint
	hashSeed                                                          maglev.Config
	// node is the node-wide part of every program's load-time configuration (config.NodeConfig).
	node  config.Node
	links []link.Link
}

func (d *datapath) Close() {
	for _, m := range []*ebpf.Map{d.services, d.backends, d.revNat, d.affinityMatch, d.maglevOuter, d.endpoints} {
		if m != nil {
			m.Close()
		}
	}
	// Closing a pinned link's fd leaves it attached: the pins keep the datapath working after this process
	// exits, as Cilium's do when its agent restarts. Deleting the pins (the lab's bpffs) and the interfaces
	// detaches it.
	for _, l := range d.links {
		l.Close()
	}
}

func globalsDir(bpffs string) string { return filepath.Join(bpffs, "tc", "globals") }

// attach attaches prog to iface with tcx and pins the link in the node's links/<device>/<name>.
func (d *datapath) attach(o options, iface netlink.Link, prog *ebpf.Program, name string, at ebpf.AttachType) error {
	dir := filepath.Join(o.bpffs, "links", iface.Attrs().Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// An earlier run's link (the agent restarted) goes first: its program is this one's predecessor.
	pin := filepath.Join(dir, name)
	if err := os.Remove(pin); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	l, err := link.AttachTCX(link.TCXOptions{Program: prog, Attach: at, Interface: iface.Attrs().Index, Anchor: link.Tail()})
	if err != nil {
		return fmt.Errorf("attaching %s to %s with tcx: %w", name, iface.Attrs().Name, err)
	}
	d.links = append(d.links, l)
	if err := l.Pin(pin); err != nil {
		return fmt.Errorf("pinning the %s link of %s: %w", name, iface.Attrs().Name, err)
	}
	return nil
}

// load sets up cilium_host and cilium_net and loads bpf_host on them and on every device, sharing the pinned
// maps, as Cilium's reloadHostEndpoint does: cil_to_host (ingress) and cil_from_host (egress) on cilium_host
// with the host endpoint's policy program in cilium_call_policy, cil_to_host on cilium_net, and
// cil_from_netdev (ingress) and cil_to_netdev (egress) on each device, all with tcx.
func load(logger *slog.Logger, o options) (*datapath, error) {
	spec, err := ebpf.LoadCollectionSpec(o.object)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", o.object, err)
	}
	globals := globalsDir(o.bpffs)
	if err := os.MkdirAll(globals, 0o755); err != nil {
		return nil, err
	}
	mcfg := maglev.DefaultConfig
	inner := spec.Maps["cilium_lb4_maglev"]
	if inner == nil || inner.InnerMap == nil {
		return nil, errors.New("the object has no cilium_lb4_maglev map: was it compiled from Cilium's bpf_host.c?")
	}
	// The LUT size is compiled in (LB_MAGLEV_LUT_SIZE); the tables written must have exactly that many slots.
	mcfg.TableSize = uint(inner.InnerMap.ValueSize / 4)

	hostDev, netDev, err := setupCiliumHost(o)
	if err != nil {
		return nil, err
	}
	d := &datapath{maglevInner: inner.InnerMap.Copy(), maglevTableSize: mcfg.TableSize, hashSeed: mcfg,
		node: nodeConstants(o, hostDev, netDev, mcfg)}
	ok := false
	defer func() {
		if !ok {
			d.Close()
		}
	}()
	pins := ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: globals}}
	policyMap := bpf.LocalMapName(policymap.MapName, hostEndpointID)

	// cilium_host: the host endpoint.
	var hostObjs hostObjects
	commit, err := bpf.LoadAndAssign(logger, &hostObjs, spec, &bpf.CollectionOptions{
		CollectionOptions: pins,
		Constants:         d.hostConstants(hostDev, hostDev),
		MapRenames: []map[string]string{{
			"cilium_calls":  bpf.LocalMapName(callsmap.HostMapName, hostEndpointID),
			"cilium_policy": policyMap,
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("loading bpf_host for %s: %w", hostDevice, err)
	}
	err = hostObjs.PolicyMap.Update(uint32(hostEndpointID), hostObjs.PolicyProg, ebpf.UpdateAny)
	if err == nil {
		err = d.attach(o, hostDev, hostObjs.ToHost, "cil_to_host", ebpf.AttachTCXIngress)
	}
	if err == nil {
		err = d.attach(o, hostDev, hostObjs.FromHost, "cil_from_host", ebpf.AttachTCXEgress)
	}
	closeAll(hostObjs.ToHost, hostObjs.FromHost, hostObjs.PolicyProg, hostObjs.PolicyMap)
	if err != nil {
		return nil, err
	}
	if err := commit(); err != nil {
		return nil, fmt.Errorf("committing bpf pins: %w", err)
	}
	// bpf_host without the host firewall has no policy map of its own: nothing to allow.
	if _, err := os.Stat(filepath.Join(globals, policyMap)); err == nil {
		if err := allowAll(filepath.Join(globals, policyMap)); err != nil {
			return nil, err
		}
	}

	// cilium_net.
	var netObjs hostNetObjects
	commit, err = bpf.LoadAndAssign(logger, &netObjs, spec, &bpf.CollectionOptions{
		CollectionOptions: pins,
		Constants:         d.hostConstants(netDev, nil),
		MapRenames: []map[string]string{{
			"cilium_calls":  bpf.LocalMapName(callsmap.NetdevMapName, uint16(netDev.Attrs().Index)),
			"cilium_policy": policyMap,
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("loading bpf_host for %s: %w", netDevice, err)
	}
	err = d.attach(o, netDev, netObjs.ToHost, "cil_to_host", ebpf.AttachTCXIngress)
	closeAll(netObjs.ToHost)
	if err != nil {
		return nil, err
	}
	if err := commit(); err != nil {
		return nil, fmt.Errorf("committing bpf pins: %w", err)
	}

	for _, dev := range o.devices {
		iface, err := netlink.LinkByName(dev)
		if err != nil {
			return nil, fmt.Errorf("interface %s: %w", dev, err)
		}
		var objs netdevObjects
		commit, err := bpf.LoadAndAssign(logger, &objs, spec, &bpf.CollectionOptions{
			CollectionOptions: pins,
			Constants:         d.netdevConstants(o, iface),
			// As Cilium's defaultNetdevMapRenames: each device gets its own tail-call array. Shared, the
			// second device's load would replace the first's pinned array, and the kernel empties a program
			// array when its last pin or fd goes: the first device's tail calls would all miss.
			MapRenames: []map[string]string{{
				"cilium_calls":  bpf.LocalMapName(callsmap.NetdevMapName, uint16(iface.Attrs().Index)),
				"cilium_policy": policyMap,
			}},
		})
		if err != nil {
			return nil, fmt.Errorf("loading bpf_host for %s: %w", dev, err)
		}
		err = d.attach(o, iface, objs.FromNetdev, "cil_from_netdev", ebpf.AttachTCXIngress)
		if err == nil {
			err = d.attach(o, iface, objs.ToNetdev, "cil_to_netdev", ebpf.AttachTCXEgress)
		}
		closeAll(objs.FromNetdev, objs.ToNetdev)
		if err != nil {
			return nil, err
		}
		if err := commit(); err != nil {
			return nil, fmt.Errorf("committing bpf pins: %w", err)
		}
	}
	open := func(name string) (*ebpf.Map, error) {
		m, err := ebpf.LoadPinnedMap(filepath.Join(globals, name), nil)
		if err != nil {
			return nil, fmt.Errorf("map %s: %w", name, err)
		}
		return m, nil
	}
	for name, dst := range map[string]**ebpf.Map{
		"cilium_lb4_services_v2":   &d.services,
		"cilium_lb4_backends_v3":   &d.backends,
		"cilium_lb4_reverse_nat":   &d.revNat,
		"cilium_lb_affinity_match": &d.affinityMatch,
		"cilium_lb4_maglev":        &d.maglevOuter,
		"cilium_lxc":               &d.endpoints,
	} {
		if *dst, err = open(name); err != nil {
			return nil, err
		}
	}
	if err := d.loadSock(logger, o); err != nil {
		return nil, err
	}
	// The host's addresses, as the agent's SyncHostEntry writes them.
	for _, a := range hostAddrs(o) {
		key := lxcmap.EndpointKey{EndpointKey: bpf.NewEndpointKey(a, 0)}
		if err := d.endpoints.Put(&key, &lxcmap.EndpointInfo{Flags: lxcmap.EndpointFlagHost}); err != nil {
			return nil, fmt.Errorf("host entry %s in cilium_lxc: %w", a, err)
		}
	}
	ok = true
	return d, nil
}

// closeAll closes what a LoadAndAssign handed back; attached and pinned, the programs stay.
func closeAll(cs ...interface{ Close() error }) {
	for _, c := range cs {
		if c != nil && !reflect.ValueOf(c).IsNil() {
			c.Close()
		}
	}
}

// allowAll writes the entries Cilium's agent writes for an endpoint no network policy selects: every identity
// allowed in both directions on every port (policy enforcement "default" with no policy).
func allowAll(path string) error {
	m, err := ebpf.LoadPinnedMap(path, nil)
	if err != nil {
		return fmt.Errorf("policy map %s: %w", filepath.Base(path), err)
	}
	defer m.Close()
	for _, k := range []policyTypes.Key{policyTypes.IngressKey(), policyTypes.EgressKey()} {
		key := policymap.NewKeyFromPolicyKey(k)
		entry := policymap.NewEntryFromPolicyEntry(key, policyTypes.AllowEntry())
		if err := m.Put(&key, &entry); err != nil {
			return fmt.Errorf("allow-all entry in %s: %w", filepath.Base(path), err)
		}
	}
	return nil
}

// nodeConstants are the node-wide load-time constants (config.NodeConfig) for this lab: the node is its own
// identity's host, the kernel (6.x) has both FIB lookup flags Cilium probes for, the cluster's Maglev seed,
// and BPF host routing (the agent enables it when the kernel supports it).
func nodeConstants(o options, hostDev, netDev netlink.Link, mcfg maglev.Config) config.Node {
	node := *config.NewNode()
	node.ClusterIDBits = identity.GetClusterIDBits()
	node.CiliumHostIfIndex = uint32(hostDev.Attrs().Index)
	copy(node.CiliumHostMAC.Addr[:], hostDev.Attrs().HardwareAddr)
	node.CiliumNetIfIndex = uint32(netDev.Attrs().Index)
	copy(node.CiliumNetMAC.Addr[:], netDev.Attrs().HardwareAddr)
	node.ServiceLoopbackIPv4.Addr = serviceLoopbackIPv4.As4()
	node.SupportsFIBLookupSkipNeigh = true
	node.SupportsFIBLookupSrc = true
	node.LBDefaultAlg = uint8(loadbalancer.SVCLoadBalancingAlgorithmRandom)
	if o.lbAlgorithm == "maglev" {
		node.LBDefaultAlg = uint8(loadbalancer.SVCLoadBalancingAlgorithmMaglev)
	}
	node.NodeportPortMin, node.NodeportPortMax = o.nodePortRange[0], o.nodePortRange[1]
	node.HashInit4Seed = mcfg.SeedJhash0
	node.HashInit6Seed = mcfg.SeedJhash1
	node.KernelHz = 1000
	node.EnableBPFHostRouting = true
	if dev, err := netlink.LinkByName(o.nodePortDev); err == nil {
		node.DirectRoutingDevIfIndex = uint32(dev.Attrs().Index)
	}
	return node
}

// hostConstants are config.CiliumHost's (mac set: cilium_host) or config.CiliumNet's (cilium_net).
func (d *datapath) hostConstants(iface, withMAC netlink.Link) *config.BPFHost {
	cfg := config.NewBPFHost(d.node)
	copy(cfg.InterfaceMAC.Addr[:], iface.Attrs().HardwareAddr)
	cfg.InterfaceIfIndex = uint32(iface.Attrs().Index)
	cfg.DeviceMTU = uint16(iface.Attrs().MTU)
	cfg.SecurityLabel = identity.ReservedIdentityHost.Uint32()
	cfg.HostEPID = hostEndpointID
	cfg.EphemeralMin = 32768
	if withMAC == nil { // cilium_net
		cfg.EnableNoServiceEndpointsRoutable = true
	}
	return cfg
}

// netdevConstants are config.Netdev's for an external device: the node masquerades NodePort traffic to its IP.
func (d *datapath) netdevConstants(o options, iface netlink.Link) *config.BPFHost {
	cfg := config.NewBPFHost(d.node)
	if mac := iface.Attrs().HardwareAddr; len(mac) == 6 {
		copy(cfg.InterfaceMAC.Addr[:], mac)
	} else {
		cfg.EthHeaderLength = 0
	}
	cfg.SecurityLabel = identity.ReservedIdentityHost.Uint32()
	cfg.InterfaceIfIndex = uint32(iface.Attrs().Index)
	cfg.DeviceMTU = uint16(iface.Attrs().MTU)
	cfg.NATIPv4Masquerade.Addr = o.nodeIP.As4()
	cfg.HostEPID = hostEndpointID
	cfg.EphemeralMin = 32768
	// The agent's default (--enable-no-service-endpoints-routable): a Service without endpoints still owns its
	// frontends, and the datapath answers for it instead of passing the packet to the stack.
	cfg.EnableNoServiceEndpointsRoutable = true
	return cfg
}
