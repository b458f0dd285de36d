// Package exec implements `k8sguide exec NODE -- CMD...`, the lab's `docker exec`.
package exec

import (
	"github.com/spf13/cobra"

	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/providers"
)

type flags struct{ Name string }

// NewCommand returns the exec command.
func NewCommand(streams lab.Streams) *cobra.Command {
	f := &flags{}
	cmd := &cobra.Command{
		Use:   "exec NODE|pod/NAME|client -- COMMAND [ARG...]",
		Short: "Run a command in a node, a pod or the lab's client (like docker exec on a kind node)",
		Example: "  k8sguide exec k8s-guide-worker2 -- iptables -t nat -nvL\n" +
			"  k8sguide exec worker -- nft list table ip kube-proxy\n" +
			"  k8sguide exec pod/web-6b4fbbd7c4-97h9q -- ip addr",
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := providers.ForLabFlag(&f.Name, cmd.Flags().Changed("name"))
			if err != nil {
				return err
			}
			argv := args[1:]
			if argv[0] == "--" { // with interspersed flags off, cobra keeps the separator
				argv = argv[1:]
			}
			return p.Exec(cmd.Context(), f.Name, args[0], argv, streams)
		},
	}
	cmd.Flags().StringVar(&f.Name, "name", "", providers.NameUsage)
	// Everything after NODE belongs to the command run in the node.
	cmd.Flags().SetInterspersed(false)
	return cmd
}
