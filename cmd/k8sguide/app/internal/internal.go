// Package internal wires the hidden commands k8sguide runs inside a lab's nodes and pods (lab/nodecmd, where
// each command's two ends are) to the code that does their work. Users do not call them.
package internal

import (
	"context"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/kerneltrace"
	"github.com/k8sguide/k8sguide/inspect/snapshot"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/netns"
	"github.com/k8sguide/k8sguide/lab/nodecmd"
	"github.com/k8sguide/k8sguide/lab/state"
)

// NewCommand returns the hidden internal command group.
func NewCommand(streams lab.Streams) *cobra.Command {
	return nodecmd.NewCommand(streams, nodecmd.Handlers{
		Collect: func(ctx context.Context, bpffs string) (any, error) {
			return snapshot.Collect(ctx, bpffs)
		},
		KernelTrace: func(ctx context.Context, engine string, f trace.Flow) (func() ([]string, error), error) {
			s, err := kerneltrace.Start(ctx, engine, f)
			if err != nil {
				return nil, err
			}
			return s.Stop, nil
		},
		KubeProxy: netns.RunKubeProxy,
		NodeInit: func(ctx context.Context, labName, node string, apiListenerFD int) error {
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			return netns.RunNodeInit(klog.NewContext(ctx, klog.Background()), state.Default(), exe, labName, node, apiListenerFD)
		},
		NodeAgent: func(ctx context.Context, labName, node string, apiListenerFD int) error {
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			return netns.RunNodeAgent(klog.NewContext(ctx, klog.Background()), state.Default(), exe, labName, node, apiListenerFD)
		},
		ControlPlane: func(ctx context.Context, labName string) error {
			return netns.RunControlPlane(ctx, state.Default(), labName)
		},
		PKI: func(ctx context.Context, labName string) error {
			return netns.WritePKI(ctx, state.Default(), labName)
		},
	})
}
