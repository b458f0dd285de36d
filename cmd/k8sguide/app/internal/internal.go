// Package internal holds the hidden commands k8sguide runs inside a lab's nodes and pods: a node's kube-proxy,
// a pod's server, the snapshot collector, the kernel tracer and the client of a verified connection. Users do
// not call them.
package internal

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/kerneltrace"
	"github.com/k8sguide/k8sguide/inspect/snapshot"
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
	cmd.AddCommand(nodeProxy(), podServer(), collect(streams), kernelTrace(streams), connect(streams))
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

func collect(streams lab.Streams) *cobra.Command {
	var bpffs string
	cmd := &cobra.Command{
		Use:  "collect",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := snapshot.Collect(cmd.Context(), bpffs)
			if err != nil {
				return err
			}
			return json.NewEncoder(streams.Out).Encode(s)
		},
	}
	cmd.Flags().StringVar(&bpffs, "bpffs", "", "the node's pinned Cilium maps (default: "+lab.DefaultCiliumMaps+" when it has them)")
	return cmd
}

// kernelTrace traces one flow in the node it runs in: it prints READY once the kernel's events are being
// read, waits until its stdin closes (the connection is done), then prints the event lines as JSON. The
// tracing table is removed on every way out, Ctrl-C included.
func kernelTrace(streams lab.Streams) *cobra.Command {
	var engine, dst, src string
	var sport int
	cmd := &cobra.Command{
		Use:  "kernel-trace",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := trace.ParseDst(dst)
			if err != nil {
				return fmt.Errorf("--dst %v", err)
			}
			f := trace.Flow{Dst: d.Addr(), Dport: d.Port(), Sport: uint16(sport), Proto: "tcp"}
			if src != "" {
				if f.Src, _, err = trace.ParseSrc(src); err != nil {
					return fmt.Errorf("--src %v", err)
				}
			}
			ctx := cmd.Context()
			s, err := kerneltrace.Start(ctx, engine, f)
			if err != nil {
				return err
			}
			fmt.Fprintln(streams.Out, "READY")
			closed := make(chan struct{})
			go func() {
				io.Copy(io.Discard, streams.In)
				close(closed)
			}()
			select {
			case <-closed:
			case <-ctx.Done():
			case <-time.After(60 * time.Second):
			}
			lines, err := s.Stop()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				return err
			}
			return json.NewEncoder(streams.Out).Encode(lines)
		},
	}
	cmd.Flags().StringVar(&engine, "engine", "nftables", "iptables or nftables")
	cmd.Flags().StringVar(&dst, "dst", "", "destination IP:PORT")
	cmd.Flags().StringVar(&src, "src", "", "source IP (empty: any)")
	cmd.Flags().IntVar(&sport, "sport", 0, "source port")
	return cmd
}

// connect makes one HTTP request from a fixed source port and prints what happened as JSON.
func connect(streams lab.Streams) *cobra.Command {
	var dst string
	var sport int
	cmd := &cobra.Command{
		Use:  "connect",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			pod, client, err := podserver.Get(cmd.Context(), dst, sport)
			out := map[string]any{"answered": err == nil, "pod": pod, "client": client}
			if err != nil {
				out["error"] = err.Error()
			}
			return json.NewEncoder(streams.Out).Encode(out)
		},
	}
	cmd.Flags().StringVar(&dst, "dst", "", "destination IP:PORT")
	cmd.Flags().IntVar(&sport, "sport", 0, "source port")
	return cmd
}
