// Package nodeip implements `k8sguide node-ip`.
package nodeip

import (
	"fmt"
	"slices"
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
		Short: "Print node:IP for every node, one node by name (worker2 or LAB-worker2), or the Nth node (1 = control-plane)",
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
			nodes := s.Nodes
			if len(args) == 1 {
				n, err := nodeArg(s, f.Name, args[0])
				if err != nil {
					return err
				}
				nodes = []lab.Node{n}
			}
			for _, n := range nodes {
				// The guide's `make node-ip-N` prints "control-plane:IP", "worker:IP", ...
				fmt.Fprintf(streams.Out, "%s:%s\n", strings.TrimPrefix(n.Name, f.Name+"-"), n.IP)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&f.Name, "name", "", providers.NameUsage)
	return cmd
}

// nodeArg is the node arg names: its number N (1 = control-plane), its name or its short name (worker2, as
// node-ip prints it).
func nodeArg(s lab.Status, labName, arg string) (lab.Node, error) {
	names := make([]string, len(s.Nodes))
	for i, n := range s.Nodes {
		if arg == fmt.Sprint(i+1) {
			return n, nil
		}
		names[i] = n.Name
	}
	name, err := lab.ResolveNode(names, labName, arg)
	if err != nil {
		return lab.Node{}, err
	}
	return s.Nodes[slices.Index(names, name)], nil
}
