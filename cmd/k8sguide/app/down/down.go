// Package down implements `k8sguide down`.
package down

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/providers"
)

type flags struct{ Name string }

// NewCommand returns the down command.
func NewCommand(streams lab.Streams) *cobra.Command {
	f := &flags{}
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Delete a lab and everything it made",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := providers.ForLabFlag(&f.Name, cmd.Flags().Changed("name"))
			if err != nil {
				return err
			}
			if err := p.Delete(cmd.Context(), f.Name); err != nil {
				return err
			}
			fmt.Fprintf(streams.Err, "Deleted lab %q\n", f.Name)
			return nil
		},
	}
	cmd.Flags().StringVar(&f.Name, "name", "", providers.NameUsage)
	return cmd
}
