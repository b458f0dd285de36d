//go:build linux

package kubeproxy

// The upstream proxiers, built as kube-proxy's server builds them. They are Linux-only upstream (//go:build
// linux), and this is the one file of k8sguide that links them: the engines' folders hold only what reads and
// walks their rules, so the offline inspector never pulls the proxiers in.

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	utilsysctl "k8s.io/component-helpers/node/util/sysctl"
	"k8s.io/kubernetes/pkg/proxy"
	upstreamiptables "k8s.io/kubernetes/pkg/proxy/iptables"
	upstreamipvs "k8s.io/kubernetes/pkg/proxy/ipvs"
	utilipset "k8s.io/kubernetes/pkg/proxy/ipvs/ipset"
	utilipvs "k8s.io/kubernetes/pkg/proxy/ipvs/util"
	upstreamnftables "k8s.io/kubernetes/pkg/proxy/nftables"
	proxyutil "k8s.io/kubernetes/pkg/proxy/util"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"

	"github.com/k8sguide/k8sguide/dataplanes/ipvs"
)

// newIPTablesProxier builds the upstream iptables proxier with kube-proxy's defaults (masquerade bit 14, localhost
// NodePorts on, no masquerade-all), for the IPv4 family the lab uses.
func newIPTablesProxier(ctx context.Context, cfg NodeConfig) (proxy.Provider, error) {
	return upstreamiptables.NewProxier(ctx, v1.IPv4Protocol,
		utiliptables.New(utiliptables.ProtocolIPv4),
		utilsysctl.New(),
		cfg.SyncPeriod, cfg.MinSyncPeriod,
		false, // --masquerade-all
		true,  // --iptables-localhost-nodeports (kube-proxy's default)
		MasqueradeBit,
		proxyutil.NewDetectLocalByCIDR(cfg.ClusterCIDR),
		cfg.NodeName, cfg.NodeIP,
		newRecorder(cfg.Logger),
		cfg.Health,
		cfg.NodePortAddresses,
		false, // --init-only
	)
}

// newNFTablesProxier builds the upstream nftables proxier with kube-proxy's defaults (masquerade bit 14, no
// masquerade-all), for the IPv4 family the lab uses.
func newNFTablesProxier(ctx context.Context, cfg NodeConfig) (proxy.Provider, error) {
	return upstreamnftables.NewProxier(ctx, v1.IPv4Protocol,
		cfg.SyncPeriod, cfg.MinSyncPeriod,
		false, // --masquerade-all
		MasqueradeBit,
		proxyutil.NewDetectLocalByCIDR(cfg.ClusterCIDR),
		cfg.NodeName, cfg.NodeIP,
		newRecorder(cfg.Logger),
		cfg.Health,
		cfg.NodePortAddresses,
		false, // --init-only
	)
}

// IPVSScheduler is kube-proxy's default --ipvs-scheduler: round robin.
const IPVSScheduler = "rr"

// newIPVSProxier builds the upstream ipvs proxier with kube-proxy's defaults (scheduler rr, masquerade bit 14, no
// strict ARP, the kernel's own IPVS timeouts, no excluded CIDRs), for the IPv4 family the lab uses. It first
// runs the check kube-proxy runs before choosing IPVS mode: the ipset version, and that a virtual server with
// the scheduler can be made (moby/ipvs hands out a handle even on a kernel without IPVS).
func newIPVSProxier(ctx context.Context, cfg NodeConfig) (proxy.Provider, error) {
	if err := ipvs.CheckKernel(); err != nil {
		return nil, err
	}
	ipvsIface := utilipvs.New()
	ipsetIface := utilipset.New()
	if err := upstreamipvs.CanUseIPVSProxier(ctx, ipvsIface, ipsetIface, IPVSScheduler); err != nil {
		return nil, fmt.Errorf("the kernel cannot run kube-proxy's IPVS mode: %w", err)
	}
	return upstreamipvs.NewProxier(ctx, v1.IPv4Protocol,
		utiliptables.New(utiliptables.ProtocolIPv4),
		ipvsIface, ipsetIface,
		utilsysctl.New(),
		cfg.SyncPeriod, cfg.MinSyncPeriod,
		nil,     // --ipvs-exclude-cidrs
		false,   // --ipvs-strict-arp
		0, 0, 0, // --ipvs-tcp-timeout, --ipvs-tcpfin-timeout, --ipvs-udp-timeout: keep the kernel's
		false, // --masquerade-all
		MasqueradeBit,
		proxyutil.NewDetectLocalByCIDR(cfg.ClusterCIDR),
		cfg.NodeName, cfg.NodeIP,
		newRecorder(cfg.Logger),
		cfg.Health,
		IPVSScheduler,
		cfg.NodePortAddresses,
		false, // --init-only
	)
}
