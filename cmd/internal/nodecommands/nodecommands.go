// Package nodecommands wires the hidden commands the CLI itself runs inside a lab's nodes (lab/nodecmd, where each
// command's two ends are): collect and kernel-trace, which `trace`, `snapshot` and `--verify` run in a node (on
// kind, the copy of k8sguide they put there). The lab's own programs (node agents, kube-proxy, the control plane)
// are k8sguide-lab's (cmd/k8sguide-lab). Users do not call them.
package nodecommands

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/kerneltrace"
	"github.com/k8sguide/k8sguide/inspect/snapshot"
	"github.com/k8sguide/k8sguide/inspect/tracer"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/nodecmd"
)

// NewCommand returns the hidden internal command group.
func NewCommand(streams lab.Streams) *cobra.Command {
	return nodecmd.NewCommand(streams, Handlers())
}

// Handlers are the node commands the CLI runs: collect and kernel-trace.
func Handlers() nodecmd.Handlers {
	return nodecmd.Handlers{
		Collect: func(ctx context.Context, bpffs, forPacket string) (any, error) {
			if forPacket == "" {
				return snapshot.Collect(ctx, bpffs)
			}
			var r tracer.ScopeRequest
			if err := json.Unmarshal([]byte(forPacket), &r); err != nil {
				return nil, fmt.Errorf("--for: %v", err)
			}
			return tracer.CollectFor(ctx, bpffs, r)
		},
		KernelTrace: func(ctx context.Context, engine string, f trace.Flow) (func() ([]string, error), error) {
			s, err := kerneltrace.Start(ctx, engine, f)
			if err != nil {
				return nil, err
			}
			return s.Stop, nil
		},
	}
}
