// Package lb implements `k8sguide lb list`: a node's Cilium load-balancing maps as `cilium-dbg bpf lb list`
// prints them.
package lb

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf"
	"github.com/k8sguide/k8sguide/inspect/snapshot"
	"github.com/k8sguide/k8sguide/inspect/tracer"
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
	cmd.AddCommand(newListCommand(streams))
	return cmd
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
	fl := cmd.Flags()
	fl.StringVar(&f.Name, "name", lab.DefaultName, "lab name")
	fl.StringVar(&f.Node, "node", "", "the lab node to read (default: the first)")
	fl.StringVar(&f.Snapshot, "snapshot", "", "read a saved snapshot instead of a live node (- for stdin)")
	fl.StringVar(&f.BPFFS, "bpffs", "", "read the Cilium maps pinned in this directory of the machine it runs on (e.g. "+lab.DefaultCiliumMaps+" on a Cilium node)")
	fl.StringVarP(&f.Output, "output", "o", "table", "table or wide")
	return cmd
}

func runList(cmd *cobra.Command, f *flags, streams lab.Streams) error {
	if f.Output != "table" && f.Output != "wide" {
		return fmt.Errorf("--output %q: want table or wide", f.Output)
	}
	if f.Snapshot != "" && f.BPFFS != "" {
		return fmt.Errorf("--snapshot and --bpffs are two different sources: give one")
	}
	var st *ebpf.State
	switch {
	case f.BPFFS != "":
		var err error
		if st, err = ebpf.Collect(f.BPFFS); err != nil {
			return err
		}
	case f.Snapshot != "":
		var data []byte
		var err error
		if f.Snapshot == "-" {
			data, err = io.ReadAll(streams.In)
		} else {
			data, err = os.ReadFile(f.Snapshot)
		}
		if err != nil {
			return err
		}
		s, err := tracer.Load(data, nil)
		if err != nil {
			return err
		}
		if st, err = ebpfOf(s, f.Snapshot); err != nil {
			return err
		}
	default:
		p, err := providers.ForLab(f.Name)
		if err != nil {
			return err
		}
		node := f.Node
		if node == "" {
			status, err := p.Status(cmd.Context(), f.Name)
			if err != nil {
				return err
			}
			node = status.Nodes[0].Name
		}
		s, err := tracer.Snapshot(cmd.Context(), p, f.Name, node)
		if err != nil {
			return err
		}
		if st, err = ebpfOf(s, node); err != nil {
			return err
		}
	}
	if f.Output == "wide" {
		_, err := io.WriteString(streams.Out, ebpf.LBListWide(st))
		return err
	}
	_, err := io.WriteString(streams.Out, ebpf.LBList(st))
	return err
}

func ebpfOf(s *snapshot.Snapshot, where string) (*ebpf.State, error) {
	if s.EBPF == nil {
		dp := s.Dataplane
		if dp == "" {
			dp = "not Cilium"
		}
		return nil, fmt.Errorf("%s has no Cilium maps (dataplane: %s)", where, dp)
	}
	return s.EBPF, nil
}
