package nodecmd

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

// kube-proxy: upstream kube-proxy (k8s.io/kubernetes/cmd/kube-proxy/app), whole, as a netns lab node runs it in
// place of kind's kube-proxy pod: its node's agent starts it in the node's namespace and restarts it when it
// dies. Every argument after the command is kube-proxy's own (--config, --hostname-override, ...).

// KubeProxyArgv is the command line of a node's kube-proxy (exe: this k8sguide), with the KubeProxyConfiguration
// file config and the node's name, as kind's DaemonSet passes --config and --hostname-override=$(NODE_NAME).
func KubeProxyArgv(exe, config, node string) []string {
	return []string{exe, Group, "kube-proxy", "--config=" + config, "--hostname-override=" + node}
}

func kubeProxyCommand(run func(ctx context.Context, args []string) error) *cobra.Command {
	return &cobra.Command{
		Use: "kube-proxy",
		// kube-proxy parses its own flags.
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if run == nil {
				return fmt.Errorf("this k8sguide has no kube-proxy")
			}
			return run(cmd.Context(), args)
		},
	}
}
