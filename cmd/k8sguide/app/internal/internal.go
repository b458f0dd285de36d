// Package internal holds the hidden commands the netns lab runs inside its namespaces: a node's kube-proxy and a
// pod's server. Users do not call them.
package internal

import (
	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/netns"
	"github.com/k8sguide/k8sguide/lab/podserver"
	"github.com/k8sguide/k8sguide/lab/state"
)

// NewCommand returns the hidden internal command group.
func NewCommand(streams lab.Streams) *cobra.Command {
	cmd := &cobra.Command{Use: "internal", Hidden: true, Short: "processes the netns lab runs in its namespaces"}
	cmd.AddCommand(nodeProxy(), podServer())
	return cmd
}

func nodeProxy() *cobra.Command {
	var name, node string
	cmd := &cobra.Command{
		Use:  "node-proxy",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := klog.NewContext(cmd.Context(), klog.Background())
			return netns.RunNodeProxy(ctx, state.Default(), name, node)
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "lab name")
	cmd.Flags().StringVar(&node, "node", "", "node name")
	return cmd
}

func podServer() *cobra.Command {
	var pod, node string
	var ports []int
	cmd := &cobra.Command{
		Use:  "pod-server",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return podserver.Serve(cmd.Context(), pod, node, ports)
		},
	}
	cmd.Flags().StringVar(&pod, "pod", "", "pod name")
	cmd.Flags().StringVar(&node, "node", "", "node name")
	cmd.Flags().IntSliceVar(&ports, "port", nil, "TCP ports to serve")
	return cmd
}
