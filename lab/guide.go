package lab

import (
	"fmt"
	"io"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/engines"
)

// GuideAliases are the guide's shell aliases for watching a node's dataplane (its `ipt`, `ipv`, `ips` and
// `cilium`, all `docker exec $NODE …` on a kind node), as the dataplane's lab face names them, written for lab
// name's last node with k8sguide's own commands, which work on both providers (a netns lab has no docker to exec
// into).
func GuideAliases(name string, d dataplanes.Name, workers int) []string {
	nodes := NodeNames(name, workers)
	node := nodes[len(nodes)-1]
	face, _ := engines.Lab(d)
	var aliases []string
	for _, a := range face.Aliases {
		argv := append([]string{"k8sguide", "exec", "--name", name, node, "--"}, a.Node...)
		if a.Command != nil {
			argv = append(append([]string{"k8sguide"}, a.Command...), "--name", name, "--node", node)
		}
		aliases = append(aliases, fmt.Sprintf("alias %s='%s'", a.Name, strings.Join(argv, " ")))
	}
	return aliases
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
