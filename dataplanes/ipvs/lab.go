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
