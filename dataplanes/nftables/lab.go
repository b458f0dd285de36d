package nftables

import "github.com/k8sguide/k8sguide/dataplanes"

// Lab is the nftables dataplane's lab face: upstream kube-proxy in nftables mode, which writes its table with
// nft; the guide watches that table.
func (Engine) Lab() dataplanes.Lab {
	return dataplanes.Lab{
		Title:         "kube-proxy nftables",
		Short:         "nft",
		KubeProxyMode: "nftables",
		Tools:         []dataplanes.Tool{{Command: "nft", Package: "nftables"}},
		Aliases:       []dataplanes.Alias{{Name: "nft-kp", Node: []string{"nft", "list", "table", "ip", "kube-proxy"}}},
	}
}

// Live is the nftables dataplane's face for a running node: pods' packets to a ClusterIP meet the prerouting
// chain's rules; kube-proxy's rules carry no counters, and each connection leaves its conntrack entry.
func (Engine) Live() dataplanes.Live {
	return dataplanes.Live{PodsWalkClusterIPs: true, Conntrack: true,
		NoCounts: "kube-proxy's nftables rules carry no counters: the kernel's record of the choice is conntrack's"}
}
