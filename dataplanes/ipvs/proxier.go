package ipvs

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	utilsysctl "k8s.io/component-helpers/node/util/sysctl"
	"k8s.io/kubernetes/pkg/proxy"
	upstream "k8s.io/kubernetes/pkg/proxy/ipvs"
	utilipset "k8s.io/kubernetes/pkg/proxy/ipvs/ipset"
	utilipvs "k8s.io/kubernetes/pkg/proxy/ipvs/util"
	proxyutil "k8s.io/kubernetes/pkg/proxy/util"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/events"
)

// Scheduler is kube-proxy's default --ipvs-scheduler: round robin.
const Scheduler = "rr"

// NewProxier builds the upstream ipvs proxier with kube-proxy's defaults (scheduler rr, masquerade bit 14, no
// strict ARP, the kernel's own IPVS timeouts, no excluded CIDRs), for the IPv4 family the lab uses. It first
// runs the check kube-proxy runs before choosing IPVS mode: the ipset version, and that a virtual server with
// the scheduler can be made (moby/ipvs hands out a handle even on a kernel without IPVS).
func NewProxier(ctx context.Context, cfg dataplanes.NodeConfig) (proxy.Provider, error) {
	if err := CheckKernel(); err != nil {
		return nil, err
	}
	ipvsIface := utilipvs.New()
	ipsetIface := utilipset.New()
	if err := upstream.CanUseIPVSProxier(ctx, ipvsIface, ipsetIface, Scheduler); err != nil {
		return nil, fmt.Errorf("the kernel cannot run kube-proxy's IPVS mode: %w", err)
	}
	return upstream.NewProxier(ctx, v1.IPv4Protocol,
		utiliptables.New(utiliptables.ProtocolIPv4),
		ipvsIface, ipsetIface,
		utilsysctl.New(),
		cfg.SyncPeriod, cfg.MinSyncPeriod,
		nil,     // --ipvs-exclude-cidrs
		false,   // --ipvs-strict-arp
		0, 0, 0, // --ipvs-tcp-timeout, --ipvs-tcpfin-timeout, --ipvs-udp-timeout: keep the kernel's
		false, // --masquerade-all
		dataplanes.MasqueradeBit,
		proxyutil.NewDetectLocalByCIDR(cfg.ClusterCIDR),
		cfg.NodeName, cfg.NodeIP,
		events.NewRecorder(cfg.Logger),
		cfg.Health,
		Scheduler,
		cfg.NodePortAddresses,
		false, // --init-only
	)
}
