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
