package nodecmd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/k8sguide/k8sguide/lab"
)

// collect: the node's snapshot, as one JSON document on stdout (inspect/snapshot's format).

// Collect runs the collector (exe is k8sguide's path inside the node) and returns the snapshot document it
// printed. bpffs is where the node's Cilium maps are pinned; empty lets the collector look in the default place.
// forPacket, when not empty, is the packet the snapshot is for (inspect/tracer.ScopeRequest as JSON): the collector
// then reads only what that packet's walk reaches.
func Collect(ctx context.Context, run Exec, exe, bpffs, forPacket string) ([]byte, error) {
	argv := []string{exe, Group, "collect"}
	if bpffs != "" {
		argv = append(argv, "--bpffs", bpffs)
	}
	if forPacket != "" {
		argv = append(argv, "--for", forPacket)
	}
	var out, errb bytes.Buffer
	if err := run(ctx, argv, lab.Streams{Out: &out, Err: &errb}); err != nil {
		return nil, failure(errb.String(), err)
	}
	return out.Bytes(), nil
}

func collectCommand(streams lab.Streams, collect func(ctx context.Context, bpffs, forPacket string) (any, error)) *cobra.Command {
	var bpffs, forPacket string
	cmd := &cobra.Command{
		Use:  "collect",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if collect == nil {
				return fmt.Errorf("this k8sguide has no collector")
			}
			s, err := collect(cmd.Context(), bpffs, forPacket)
			if err != nil {
				return err
			}
			return json.NewEncoder(streams.Out).Encode(s)
		},
	}
	cmd.Flags().StringVar(&bpffs, "bpffs", "", "the node's pinned Cilium maps (default: "+lab.DefaultCiliumMaps+" when it has them)")
	cmd.Flags().StringVar(&forPacket, "for", "", "read only what this packet's trace reaches (JSON: a request and the names its walk needs)")
	return cmd
}
