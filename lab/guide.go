package lab

import (
	"fmt"
	"io"

	"github.com/k8sguide/k8sguide/dataplanes"
)

// GuideAliases are the guide's shell aliases for watching a node's dataplane (its `ipt`, `ipv`, `ips` and
// `cilium`, all `docker exec $NODE …` on a kind node), written for lab name's last node with k8sguide's own
// commands, which work on both providers (a netns lab has no docker to exec into).
func GuideAliases(name string, d dataplanes.Name, workers int) []string {
	nodes := NodeNames(name, workers)
	node := nodes[len(nodes)-1]
	in := fmt.Sprintf("k8sguide exec --name %s %s --", name, node)
	switch d {
	case dataplanes.IPTables:
		return []string{fmt.Sprintf("alias ipt='%s iptables -t nat -nvL'", in)}
	case dataplanes.NFTables:
		return []string{fmt.Sprintf("alias nft-kp='%s nft list table ip kube-proxy'", in)}
	case dataplanes.IPVS:
		return []string{
			fmt.Sprintf("alias ipv='%s ipvsadm -ln'", in),
			fmt.Sprintf("alias ips='%s ipset list'", in),
		}
	case dataplanes.EBPF:
		// The guide's `cilium bpf lb list`, read from the node's maps.
		return []string{fmt.Sprintf("alias lb='k8sguide lb list --name %s --node %s'", name, node)}
	}
	return nil
}

// PrintGuideAliases writes the guide's aliases for a lab just made, under the lab's summary.
func PrintGuideAliases(w io.Writer, cfg Config) {
	aliases := GuideAliases(cfg.Name, cfg.Dataplane, cfg.Workers)
	if len(aliases) == 0 {
		return
	}
	fmt.Fprintln(w, "The guide's aliases for this lab:")
	for _, a := range aliases {
		fmt.Fprintln(w, "  "+a)
	}
}
