package ipvs

import "github.com/k8sguide/k8sguide/dataplanes"

// Lab is the IPVS dataplane's lab face: upstream kube-proxy in IPVS mode, which keeps iptables rules and ipsets
// around its virtual servers; the guide watches both (its `ipv` and `ips`).
func (Engine) Lab() dataplanes.Lab {
	return dataplanes.Lab{
		Title:         "kube-proxy ipvs",
		Short:         "ipvs",
		KubeProxyMode: "ipvs",
		Tools: []dataplanes.Tool{
			{Command: "iptables-restore", Package: "iptables"},
			{Command: "ipset", Package: "ipset"},
		},
		Aliases: []dataplanes.Alias{
			{Name: "ipv", Node: []string{"ipvsadm", "-ln"}},
			{Name: "ips", Node: []string{"ipset", "list"}},
		},
	}
}

// Live is the IPVS dataplane's face for a running node: pods' packets to a ClusterIP meet PREROUTING and IPVS;
// a Local policy with no local endpoint sends to every endpoint (kube-proxy's ipvs syncEndpoint,
// kubernetes#97081); IPVS counts per real server, not per choice rule, and each connection leaves its conntrack
// entry.
func (Engine) Live() dataplanes.Live {
	return dataplanes.Live{PodsWalkClusterIPs: true, LocalFallsBackToAll: true, Conntrack: true,
		NoCounts: "IPVS has no choice rules to count: the kernel's record of the choice is conntrack's"}
}
