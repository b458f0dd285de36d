package main

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/cilium/cilium/pkg/mac"
	"github.com/vishvananda/netlink"
)

// The node's side of Cilium's native-routing pod network, as the agent's loader makes it
// (pkg/datapath/loader: setupBaseDevice, addHostDeviceAddr, and the routes of pkg/datapath/linux/route for
// the local pod CIDR): the veth pair cilium_host/cilium_net with ARP off, cilium_host holding the router
// address (the pods' gateway, IPV4_GATEWAY), and the node's pod CIDR routed to cilium_host. A packet the node
// sends to a local pod leaves through cilium_host, where bpf_host's cil_from_host delivers it to the pod's
// endpoint; routes to the other nodes' CIDRs via their addresses are the lab's (Cilium's
// auto-direct-node-routes).

const (
	hostDevice = "cilium_host"
	netDevice  = "cilium_net"
)

// setupCiliumHost creates (or finds, after a restart) cilium_host and cilium_net and their address and routes.
func setupCiliumHost(o options) (host, peer netlink.Link, err error) {
	if _, err := netlink.LinkByName(hostDevice); err != nil {
		hostMAC, err := mac.GenerateRandMAC()
		if err != nil {
			return nil, nil, err
		}
		peerMAC, err := mac.GenerateRandMAC()
		if err != nil {
			return nil, nil, err
		}
		veth := &netlink.Veth{
			LinkAttrs:        netlink.LinkAttrs{Name: hostDevice, HardwareAddr: net.HardwareAddr(hostMAC), TxQLen: 1000},
			PeerName:         netDevice,
			PeerHardwareAddr: net.HardwareAddr(peerMAC),
		}
		if err := netlink.LinkAdd(veth); err != nil {
			return nil, nil, fmt.Errorf("adding %s/%s: %w", hostDevice, netDevice, err)
		}
	}
	if host, err = netlink.LinkByName(hostDevice); err != nil {
		return nil, nil, err
	}
	if peer, err = netlink.LinkByName(netDevice); err != nil {
		return nil, nil, err
	}
	for _, l := range []netlink.Link{host, peer} {
		if err := netlink.LinkSetARPOff(l); err != nil {
			return nil, nil, fmt.Errorf("ARP off on %s: %w", l.Attrs().Name, err)
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return nil, nil, fmt.Errorf("%s up: %w", l.Attrs().Name, err)
		}
	}
	router := o.routerIP.AsSlice()
	if err := netlink.AddrReplace(host, &netlink.Addr{IPNet: &net.IPNet{IP: router, Mask: net.CIDRMask(32, 32)}}); err != nil {
		return nil, nil, fmt.Errorf("router address %s on %s: %w", o.routerIP, hostDevice, err)
	}
	cidr := net.IPNet{IP: o.podCIDR.Addr().AsSlice(), Mask: net.CIDRMask(o.podCIDR.Bits(), 32)}
	for _, r := range []netlink.Route{
		// 10.244.1.1 dev cilium_host scope link
		{LinkIndex: host.Attrs().Index, Dst: &net.IPNet{IP: router, Mask: net.CIDRMask(32, 32)}, Scope: netlink.SCOPE_LINK},
		// 10.244.1.0/24 via 10.244.1.1 dev cilium_host src 10.244.1.1
		{LinkIndex: host.Attrs().Index, Dst: &cidr, Gw: router, Src: router},
	} {
		if err := netlink.RouteReplace(&r); err != nil {
			return nil, nil, fmt.Errorf("route %s on %s: %w", r.Dst, hostDevice, err)
		}
	}
	// As the loader's Reinitialize: no reverse-path filter (a reply from a pod arrives on its lxc device, whose
	// address the node routes through cilium_host), and forwarding on the new devices.
	for _, s := range []struct{ path, val string }{
		{"net/ipv4/conf/all/rp_filter", "0"},
		{"net/ipv4/conf/" + hostDevice + "/rp_filter", "0"},
		{"net/ipv4/conf/" + netDevice + "/rp_filter", "0"},
		{"net/ipv4/conf/" + hostDevice + "/forwarding", "1"},
		{"net/ipv4/conf/" + netDevice + "/forwarding", "1"},
	} {
		if err := writeSysctl(s.path, s.val); err != nil {
			return nil, nil, err
		}
	}
	return host, peer, nil
}

// writeSysctl sets a sysctl of the node's namespace (the agent runs in it, with the node's /proc/sys).
func writeSysctl(path, val string) error {
	if err := os.WriteFile(filepath.Join("/proc/sys", path), []byte(val), 0o644); err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", path, val, err)
	}
	return nil
}

// hostAddrs are the node's own addresses the datapath must know as the host's: Cilium writes each into
// cilium_lxc with the host flag, so that a pod's packet to one goes to the stack, not to a pod.
func hostAddrs(o options) []netip.Addr { return []netip.Addr{o.nodeIP, o.routerIP} }
