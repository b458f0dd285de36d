package ebpf

import "github.com/k8sguide/k8sguide/dataplanes"

// Lab is the ebpf dataplane's lab face: Cilium's agent and datapath in place of kube-proxy and the default CNI.
// The guide's `cilium bpf lb list` is k8sguide's `lb list`, read from the node's maps.
func (Engine) Lab() dataplanes.Lab {
	return dataplanes.Lab{
		Title:        "Cilium eBPF (kube-proxy replacement)",
		Short:        "ebpf",
		Agent:        dataplanes.AgentCilium,
		LBAlgorithms: []string{LBRandom, LBMaglev},
		Aliases:      []dataplanes.Alias{{Name: "lb", Command: []string{"lb", "list"}}},
	}
}

// Cilium's load-balancing algorithms (its loadBalancer.algorithm): a random backend per new flow, or Maglev's
// consistent hashing of the flow.
const (
	LBRandom = "random"
	LBMaglev = "maglev"
)

// Live is the ebpf dataplane's face for a running node: a pod's packets to a ClusterIP are balanced by bpf_lxc on
// its veth (or at connect by the socket LB), not on a path from the pod network that a walk shows; the datapath
// counts none of its choices, and its own record of each is a CT_SERVICE entry of its conntrack map.
func (Engine) Live() dataplanes.Live {
	return dataplanes.Live{
		Choices:  ServiceChoices,
		Record:   "the run's new service entries in Cilium's conntrack map (cilium_ct4_global), each naming the backend the datapath chose",
		NoCounts: "Cilium's datapath keeps no count of its choices: its record of each is its conntrack map's",
	}
}
