// Package nftables is the kube-proxy nftables engine.
package nftables

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/proxy"
	upstream "k8s.io/kubernetes/pkg/proxy/nftables"
	proxyutil "k8s.io/kubernetes/pkg/proxy/util"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/events"
)

// NewProxier builds the upstream nftables proxier with kube-proxy's defaults (masquerade bit 14, no
// masquerade-all), for the IPv4 family the lab uses.
func NewProxier(ctx context.Context, cfg dataplanes.NodeConfig) (proxy.Provider, error) {
	return upstream.NewProxier(ctx, v1.IPv4Protocol,
		cfg.SyncPeriod, cfg.MinSyncPeriod,
		false, // --masquerade-all
		dataplanes.MasqueradeBit,
		proxyutil.NewDetectLocalByCIDR(cfg.ClusterCIDR),
		cfg.NodeName, cfg.NodeIP,
		events.NewRecorder(cfg.Logger),
		cfg.Health,
		cfg.NodePortAddresses,
		false, // --init-only
	)
}
