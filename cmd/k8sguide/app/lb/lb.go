// Package lb implements `k8sguide lb`: a node's Cilium load-balancing state as cilium-dbg prints it — `lb list`
// (`bpf lb list`), `lb services` (`service list`), `lb endpoints` (`bpf endpoint list`), `lb ct` (`bpf ct list
// global`) and `lb socknat` (`bpf socknat list`, the socket LB's state).
package lb

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/providers"
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
	cmd.AddCommand(newListCommand(streams), newServicesCommand(streams), newEndpointsCommand(streams), newCTCommand(streams), newSockNATCommand(streams))
	return cmd
}

func sourceFlags(cmd *cobra.Command, f *flags) {
	fl := cmd.Flags()
	fl.StringVar(&f.Name, "name", "", providers.NameUsage)
	fl.StringVar(&f.Node, "node", "", "the lab node to read (default: the first)")
	fl.StringVar(&f.Snapshot, "snapshot", "", "read a saved snapshot instead of a live node (- for stdin)")
	fl.StringVar(&f.BPFFS, "bpffs", "", "read the Cilium maps pinned in this directory of the machine it runs on (e.g. "+lab.DefaultCiliumMaps+" on a Cilium node)")
}

// newViewCommand is an lb subcommand that prints one view of the node's maps: as a table (cilium-dbg's text), or
// with -o json as jsonHelp says.
func newViewCommand(streams lab.Streams, use, short, jsonHelp string, table func(*ebpf.State) string, asJSON func(*ebpf.State) any) *cobra.Command {
	f := &flags{}
	cmd := &cobra.Command{
		Use:   use + " [--node NODE | --snapshot FILE | --bpffs DIR]",
		Short: short,
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
				return writeJSON(streams.Out, asJSON(st))
			}
			_, err = io.WriteString(streams.Out, table(st))
			return err
		},
	}
	sourceFlags(cmd, f)
	cmd.Flags().StringVarP(&f.Output, "output", "o", "table", "table or json ("+jsonHelp+")")
	return cmd
}

func newEndpointsCommand(streams lab.Streams) *cobra.Command {
	return newViewCommand(streams, "endpoints", "Endpoints (cilium_lxc) as `cilium-dbg bpf endpoint list` prints them",
		"cilium-dbg's -o json: address to entries", ebpf.EndpointList, func(s *ebpf.State) any { return ebpf.EndpointMap(s) })
}

func newServicesCommand(streams lab.Streams) *cobra.Command {
	return newViewCommand(streams, "services", "Frontends and their backends as `cilium-dbg service list` prints them",
		"id, frontend, type, flags and backends of each frontend", ebpf.ServiceList, func(s *ebpf.State) any { return ebpf.Services(s) })
}

func newCTCommand(streams lab.Streams) *cobra.Command {
	return newViewCommand(streams, "ct", "Conntrack entries as `cilium-dbg bpf ct list global` prints them",
		"each entry's map, decoded tuple and entry, and raw bytes", ebpf.CTList, func(s *ebpf.State) any {
			return struct {
				Entries      []ebpf.CTRow `json:"entries"`
				NotCollected int          `json:"notCollected"`
			}{s.CT, s.CTOther}
		})
}

func newSockNATCommand(streams lab.Streams) *cobra.Command {
	return newViewCommand(streams, "socknat", "Socket-LB sockets (cilium_lb4_reverse_sk) as `cilium-dbg bpf socknat list` shows them",
		"cilium-dbg's -o json: socket cookie to entries", ebpf.SockNATList, func(s *ebpf.State) any { return ebpf.SockNATMap(s) })
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // "->" in entries, as cilium-dbg prints them
	return enc.Encode(v)
}

func newListCommand(streams lab.Streams) *cobra.Command {
	f := &flags{}
	cmd := &cobra.Command{
		Use:   "list [--node NODE | --snapshot FILE | --bpffs DIR]",
		Short: "Service, backend and rev-NAT maps as `cilium-dbg bpf lb list` prints them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runList(cmd, f, streams)
		},
	}
	sourceFlags(cmd, f)
	cmd.Flags().StringVarP(&f.Output, "output", "o", "table", "table, wide, or json (cilium-dbg's -o json: each services-map key to its entry)")
	return cmd
}

func runList(cmd *cobra.Command, f *flags, streams lab.Streams) error {
	if f.Output != "table" && f.Output != "wide" && f.Output != "json" {
		return fmt.Errorf("--output %q: want table, wide or json", f.Output)
	}
	st, err := ciliumMaps(cmd.Context(), mapsSource{bpffs: f.BPFFS, snapshot: f.Snapshot, in: streams.In, lab: f.Name, node: f.Node})
	if err != nil {
		return err
	}
	if f.Output == "json" {
		return writeJSON(streams.Out, ebpf.LBMap(st))
	}
	list := ebpf.LBList
	if f.Output == "wide" {
		list = ebpf.LBListWide
	}
	_, err = io.WriteString(streams.Out, list(st))
	return err
}
