package kubeproxy

import (
	"net"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/proxy/healthcheck"
)

// NodeConfig is what a node's proxy needs to know: the same facts kube-proxy takes from its flags and its Node.
type NodeConfig struct {
	NodeName string
	NodeIP   net.IP
	// ClusterCIDR is the pod network (--cluster-cidr); traffic from outside it is masqueraded.
	ClusterCIDR string
	// NodePortAddresses is --nodeport-addresses: nil serves NodePorts on every local address.
	NodePortAddresses []string
	SyncPeriod        time.Duration
	MinSyncPeriod     time.Duration
	// Health is told after every successful sync, as kube-proxy's /healthz is.
	Health *healthcheck.ProxyHealthServer
	Logger klog.Logger
}

// MasqueradeBit is kube-proxy's default --iptables-masquerade-bit / --nftables-masquerade-bit: mark 0x4000.
const MasqueradeBit = 14
