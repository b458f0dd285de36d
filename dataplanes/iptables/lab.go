package iptables

import "github.com/k8sguide/k8sguide/dataplanes"

// Lab is the iptables dataplane's lab face: upstream kube-proxy in iptables mode, which writes its rules with
// iptables-restore; the guide watches the nat table.
func (Engine) Lab() dataplanes.Lab {
	return dataplanes.Lab{
		Title:         "kube-proxy iptables",
		Short:         "ipt",
		KubeProxyMode: "iptables",
		Tools:         []dataplanes.Tool{{Command: "iptables-restore", Package: "iptables"}},
		Aliases:       []dataplanes.Alias{{Name: "ipt", Node: []string{"iptables", "-t", "nat", "-nvL"}}},
	}
}

// Live is the iptables dataplane's face for a running node: pods' packets to a ClusterIP meet PREROUTING's rules;
// the nat rules of the statistic cascade count the packets each choice took, and each connection leaves its
// conntrack entry.
func (Engine) Live() dataplanes.Live {
	return dataplanes.Live{PodsWalkClusterIPs: true, CountingTable: "nat", Conntrack: true}
}
