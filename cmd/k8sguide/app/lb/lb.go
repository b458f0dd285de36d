// Package lb implements `k8sguide lb list` and `lb endpoints`: a node's Cilium load-balancing maps and its
// endpoints as `cilium-dbg bpf lb list` and `cilium-dbg bpf endpoint list` print them.
package lb

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf"
	"github.com/k8sguide/k8sguide/lab"
)

type flags struct {
	Name, Node, Snapshot, BPFFS, Output string
}

// NewCommand returns the lb command.
func NewCommand(streams lab.Streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lb",
		Short: "Cilium's load-balancing maps on an ebpf node",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newListCommand(streams), newEndpointsCommand(streams))
	return cmd
}

func sourceFlags(cmd *cobra.Command, f *flags) {
	fl := cmd.Flags()
	fl.StringVar(&f.Name, "name", lab.DefaultName, "lab name")
	fl.StringVar(&f.Node, "node", "", "the lab node to read (default: the first)")
	fl.StringVar(&f.Snapshot, "snapshot", "", "read a saved snapshot instead of a live node (- for stdin)")
	fl.StringVar(&f.BPFFS, "bpffs", "", "read the Cilium maps pinned in this directory of the machine it runs on (e.g. "+lab.DefaultCiliumMaps+" on a Cilium node)")
}

func newEndpointsCommand(streams lab.Streams) *cobra.Command {
	f := &flags{}
	cmd := &cobra.Command{
		Use:   "endpoints [--node NODE | --snapshot FILE | --bpffs DIR]",
		Short: "Print the node's endpoints map (cilium_lxc) as `cilium-dbg bpf endpoint list` does",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.Output != "table" && f.Output != "json" {
				return fmt.Errorf("--output %q: want table or json", f.Output)
			}
			st, err := ciliumMaps(cmd.Context(), mapsSource{bpffs: f.BPFFS, snapshot: f.Snapshot, in: streams.In, lab: f.Name, node: f.Node})
			if err != nil {
				return err
			}
			if f.Output == "json" {
				return writeJSON(streams.Out, ebpf.EndpointMap(st))
			}
			_, err = io.WriteString(streams.Out, ebpf.EndpointList(st))
			return err
		},
	}
	sourceFlags(cmd, f)
	cmd.Flags().StringVarP(&f.Output, "output", "o", "table", "table or json (cilium-dbg's -o json: address to entries)")
	return cmd
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newListCommand(streams lab.Streams) *cobra.Command {
	f := &flags{}
	cmd := &cobra.Command{
		Use:   "list [--node NODE | --snapshot FILE | --bpffs DIR]",
		Short: "Print the service, backend and reverse-NAT maps as `cilium-dbg bpf lb list` does (-o wide: with the raw keys and values)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runList(cmd, f, streams)
		},
	}
	sourceFlags(cmd, f)
	cmd.Flags().StringVarP(&f.Output, "output", "o", "table", "table or wide")
	return cmd
}

func runList(cmd *cobra.Command, f *flags, streams lab.Streams) error {
	if f.Output != "table" && f.Output != "wide" {
		return fmt.Errorf("--output %q: want table or wide", f.Output)
	}
	st, err := ciliumMaps(cmd.Context(), mapsSource{bpffs: f.BPFFS, snapshot: f.Snapshot, in: streams.In, lab: f.Name, node: f.Node})
	if err != nil {
		return err
	}
	list := ebpf.LBList
	if f.Output == "wide" {
		list = ebpf.LBListWide
	}
	_, err = io.WriteString(streams.Out, list(st))
	return err
}
