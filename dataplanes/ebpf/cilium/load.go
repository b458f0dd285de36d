package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/cilium/cilium/pkg/bpf"
	"github.com/cilium/cilium/pkg/datapath/config"
	"github.com/cilium/cilium/pkg/identity"
	"github.com/cilium/cilium/pkg/loadbalancer"
	"github.com/cilium/cilium/pkg/maglev"
	"github.com/cilium/cilium/pkg/maps/callsmap"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
)

// netdevObjects are what the loader hands back for one device, as Cilium's loader asks for them
// (pkg/datapath/loader hostNetdevObjects), plus the load-balancing maps this proxy programs.
type netdevObjects struct {
	FromNetdev *ebpf.Program `ebpf:"cil_from_netdev"`
	ToNetdev   *ebpf.Program `ebpf:"cil_to_netdev"`
}

// datapath is a node's loaded bpf_host: its pinned maps, and the tcx links that keep the programs attached.
type datapath struct {
	services, backends, revNat, affinityMatch, maglevOuter *ebpf.Map
	maglevInner                                            *ebpf.MapSpec
	maglevTableSize                                        uint
	hashSeed                                               maglev.Config
	links                                                  []link.Link
}

func (d *datapath) Close() {
	for _, m := range []*ebpf.Map{d.services, d.backends, d.revNat, d.affinityMatch, d.maglevOuter} {
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

// load loads the node's bpf_host object once per device with that device's constants, sharing the pinned maps,
// and attaches cil_from_netdev (ingress) and cil_to_netdev (egress) with tcx, as Cilium's
// attachNetworkDevices does with EnableTCX.
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

	d := &datapath{maglevInner: inner.InnerMap.Copy(), maglevTableSize: mcfg.TableSize, hashSeed: mcfg}
	ok := false
	defer func() {
		if !ok {
			d.Close()
		}
	}()
	for _, dev := range o.devices {
		iface, err := netlink.LinkByName(dev)
		if err != nil {
			return nil, fmt.Errorf("interface %s: %w", dev, err)
		}
		var objs netdevObjects
		commit, err := bpf.LoadAndAssign(logger, &objs, spec, &bpf.CollectionOptions{
			CollectionOptions: ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: globals}},
			Constants:         netdevConstants(o, iface, mcfg),
			// As Cilium's defaultNetdevMapRenames: each device gets its own tail-call array. Shared, the
			// second device's load would replace the first's pinned array, and the kernel empties a program
			// array when its last pin or fd goes: the first device's tail calls would all miss.
			MapRenames: []map[string]string{{"cilium_calls": bpf.LocalMapName(callsmap.NetdevMapName, uint16(iface.Attrs().Index))}},
		})
		if err != nil {
			return nil, fmt.Errorf("loading bpf_host for %s: %w", dev, err)
		}
		linkDir := filepath.Join(o.bpffs, "links", dev)
		if err := os.MkdirAll(linkDir, 0o755); err != nil {
			return nil, err
		}
		for _, a := range []struct {
			prog   *ebpf.Program
			name   string
			attach ebpf.AttachType
		}{{objs.FromNetdev, "cil_from_netdev", ebpf.AttachTCXIngress}, {objs.ToNetdev, "cil_to_netdev", ebpf.AttachTCXEgress}} {
			l, err := link.AttachTCX(link.TCXOptions{Program: a.prog, Attach: a.attach, Interface: iface.Attrs().Index, Anchor: link.Tail()})
			if err != nil {
				return nil, fmt.Errorf("attaching %s to %s with tcx: %w", a.name, dev, err)
			}
			d.links = append(d.links, l)
			if err := l.Pin(filepath.Join(linkDir, a.name)); err != nil {
				return nil, fmt.Errorf("pinning the %s link of %s: %w", a.name, dev, err)
			}
		}
		objs.FromNetdev.Close()
		objs.ToNetdev.Close()
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
	} {
		if *dst, err = open(name); err != nil {
			return nil, err
		}
	}
	ok = true
	return d, nil
}

// netdevConstants are the load-time constants Cilium's config.Netdev sets for an external device, for this
// lab: the node is its own identity's host, masquerades NodePort traffic to its IP, and uses the cluster's
// Maglev seed for the tuple hash.
func netdevConstants(o options, iface netlink.Link, mcfg maglev.Config) *config.BPFHost {
	node := *config.NewNode()
	node.ClusterIDBits = identity.GetClusterIDBits()
	// This kernel (6.18) has both FIB lookup flags; Cilium probes for them.
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

	cfg := config.NewBPFHost(node)
	if mac := iface.Attrs().HardwareAddr; len(mac) == 6 {
		copy(cfg.InterfaceMAC.Addr[:], mac)
	} else {
		cfg.EthHeaderLength = 0
	}
	cfg.SecurityLabel = identity.ReservedIdentityHost.Uint32()
	cfg.InterfaceIfIndex = uint32(iface.Attrs().Index)
	cfg.DeviceMTU = uint16(iface.Attrs().MTU)
	cfg.NATIPv4Masquerade.Addr = o.nodeIP.As4()
	cfg.EphemeralMin = 32768
	// The agent's default (--enable-no-service-endpoints-routable): a Service without endpoints still owns its
	// frontends, and the datapath answers for it instead of passing the packet to the stack.
	cfg.EnableNoServiceEndpointsRoutable = true
	return cfg
}
