// Package iptables is the kube-proxy iptables engine.
package iptables

import (
	"context"

	v1 "k8s.io/api/core/v1"
	utilsysctl "k8s.io/component-helpers/node/util/sysctl"
	"k8s.io/kubernetes/pkg/proxy"
	upstream "k8s.io/kubernetes/pkg/proxy/iptables"
	proxyutil "k8s.io/kubernetes/pkg/proxy/util"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/events"
)

// NewProxier builds the upstream iptables proxier with kube-proxy's defaults (masquerade bit 14, localhost
// NodePorts on, no masquerade-all), for the IPv4 family the lab uses.
func NewProxier(ctx context.Context, cfg dataplanes.NodeConfig) (proxy.Provider, error) {
	return upstream.NewProxier(ctx, v1.IPv4Protocol,
		utiliptables.New(utiliptables.ProtocolIPv4),
		utilsysctl.New(),
		cfg.SyncPeriod, cfg.MinSyncPeriod,
		false, // --masquerade-all
		true,  // --iptables-localhost-nodeports (kube-proxy's default)
		dataplanes.MasqueradeBit,
		proxyutil.NewDetectLocalByCIDR(cfg.ClusterCIDR),
		cfg.NodeName, cfg.NodeIP,
		events.NewRecorder(cfg.Logger),
		cfg.Health,
		cfg.NodePortAddresses,
		false, // --init-only
	)
}
