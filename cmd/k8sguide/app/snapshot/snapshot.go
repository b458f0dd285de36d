// Package snapshot implements `k8sguide snapshot`.
package snapshot

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/k8sguide/k8sguide/inspect/live"
	"github.com/k8sguide/k8sguide/inspect/render"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/providers"
)

type flags struct {
	Name, Node, Output string
}

// NewCommand returns the snapshot command.
func NewCommand(streams lab.Streams) *cobra.Command {
	f := &flags{}
	cmd := &cobra.Command{
		Use:   "snapshot --node NODE [-o FILE]",
		Short: "Save everything a trace needs from one node (rules, routes, conntrack, …) as one JSON document",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.Node == "" {
				return fmt.Errorf("--node is required")
			}
			p, err := providers.ForLabFlag(&f.Name, cmd.Flags().Changed("name"))
			if err != nil {
				return err
			}
			// The node as the lab names it (worker2 is LAB-worker2), for the collector and the snapshot's record.
			st, err := p.Status(cmd.Context(), f.Name)
			if err != nil {
				return err
			}
			if f.Node, err = lab.ResolveNode(st.NodeNames(), f.Name, f.Node); err != nil {
				return err
			}
			s, err := live.Snapshot(cmd.Context(), p, f.Name, f.Node)
			if err != nil {
				return err
			}
			data, err := json.MarshalIndent(s, "", "  ")
			if err != nil {
				return err
			}
			data = append(data, '\n')
			if f.Output == "" || f.Output == "-" {
				_, err = streams.Out.Write(data)
				return err
			}
			if err := os.WriteFile(f.Output, data, 0o644); err != nil {
				return err
			}
			// The path is the user's, as typed: shown, never acted on by the terminal.
			fmt.Fprintf(streams.Err, "Snapshot of %s written to %s\n", f.Node, render.Visible(f.Output))
			return nil
		},
	}
	cmd.Flags().StringVar(&f.Name, "name", "", providers.NameUsage)
	cmd.Flags().StringVar(&f.Node, "node", "", "node to capture (worker2 or LAB-worker2)")
	cmd.Flags().StringVarP(&f.Output, "output", "o", "", "file to write (default: standard output)")
	return cmd
}
