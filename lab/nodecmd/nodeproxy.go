package nodecmd

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

// node-proxy: a netns lab node's proxy (kube-proxy or the Cilium agent's datapath), started detached by the
// provider in the node's namespace; it runs until killed. It answers through files in the lab's state folder
// (which generation it applied), not on stdout.

// NodeProxyArgv is the command line that runs the proxy of lab labName's node (exe: this k8sguide).
func NodeProxyArgv(exe, labName, node string) []string {
	return []string{exe, Group, "node-proxy", "--name", labName, "--node", node}
}

func nodeProxyCommand(run func(ctx context.Context, labName, node string) error) *cobra.Command {
	var name, node string
	cmd := &cobra.Command{
		Use:  "node-proxy",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if run == nil {
				return fmt.Errorf("this k8sguide has no node proxy")
			}
			return run(cmd.Context(), name, node)
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "lab name")
	cmd.Flags().StringVar(&node, "node", "", "node name")
	return cmd
}
