// Package nodeip implements `k8sguide node-ip`.
package nodeip

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/providers"
)

type flags struct{ Name string }

// NewCommand returns the node-ip command.
func NewCommand(streams lab.Streams) *cobra.Command {
	f := &flags{}
	cmd := &cobra.Command{
		Use:   "node-ip [NODE|N]",
		Short: "Print node:IP for every node, one node by name, or the Nth node (1 = control-plane)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := providers.ForLabFlag(&f.Name, cmd.Flags().Changed("name"))
			if err != nil {
				return err
			}
			s, err := p.Status(cmd.Context(), f.Name)
			if err != nil {
				return err
			}
			for i, n := range s.Nodes {
				if len(args) == 0 || args[0] == n.Name || args[0] == fmt.Sprint(i+1) {
					// The guide's `make node-ip-N` prints "control-plane:IP", "worker:IP", ...
					fmt.Fprintf(streams.Out, "%s:%s\n", strings.TrimPrefix(n.Name, f.Name+"-"), n.IP)
					if len(args) == 1 {
						return nil
					}
				}
			}
			if len(args) == 1 {
				var names []string
				for _, n := range s.Nodes {
					names = append(names, n.Name)
				}
				return &lab.NotFoundError{Kind: "node", Name: args[0], Known: names}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&f.Name, "name", "", providers.NameUsage)
	return cmd
}
