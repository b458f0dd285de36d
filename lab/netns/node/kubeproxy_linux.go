package node

import (
	"context"

	kubeproxyapp "k8s.io/kubernetes/cmd/kube-proxy/app"
)

// RunKubeProxy is `internal kube-proxy`: upstream kube-proxy's own command, with its own flags, in this process.
// It runs in a node's namespace (it removes other modes' rules at start-up, which must never happen to the
// host's), started by the node's agent.
func RunKubeProxy(ctx context.Context, args []string) error {
	cmd := kubeproxyapp.NewProxyCommand()
	cmd.SetArgs(args)
	cmd.SilenceUsage = true
	return cmd.ExecuteContext(ctx)
}
