// Package counters implements `k8sguide counters`.
package counters

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/k8sguide/k8sguide/inspect/live"
	"github.com/k8sguide/k8sguide/inspect/render"
	"github.com/k8sguide/k8sguide/inspect/request"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/providers"
)

type flags struct {
	Name, Node, Service, Dst, Output string
	Count, Parallel                  int
}

// MaxCount bounds --count: connections, each a process in the lab's client.
const MaxCount = 10000

// NewCommand returns the counters command.
func NewCommand(streams lab.Streams) *cobra.Command {
	f := &flags{}
	cmd := &cobra.Command{
		Use:   "counters (--service NAME | --dst IP:PORT) [--node NODE] [--count 300]",
		Short: "Make N real connections and put what the kernel counted beside the trace's chances",
		Long: "Traces a packet from the client to a node's NodePort (or --dst), makes --count real connections like it,\n" +
			"and prints each endpoint's chance in the trace beside the share of connections its pod answered; on\n" +
			"iptables also each rule of kube-proxy's random choice with the kernel's packet counters before and\n" +
			"after (the 1/3 → 1/2 → rest cascade), and whether the numbers fit the chances (Pearson's chi-square).",
		Example: "  k8sguide counters --node worker2 --service web --count 300",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runE(cmd, f, streams)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.Name, "name", "", providers.NameUsage)
	fl.StringVar(&f.Node, "node", "", "the node the packets are sent to (name or short name; default: the one that owns --dst, else with --service the lab's last)")
	fl.StringVar(&f.Service, "service", "", "a Service: its NodePort on --node")
	fl.StringVar(&f.Dst, "dst", "", "IP:PORT instead of --service")
	fl.IntVar(&f.Count, "count", 300, fmt.Sprintf("connections to make (1-%d)", MaxCount))
	fl.IntVar(&f.Parallel, "parallel", 8, "connections at a time")
	fl.StringVarP(&f.Output, "output", "o", "table", "table or json")
	return cmd
}

func runE(cmd *cobra.Command, f *flags, streams lab.Streams) error {
	format, err := render.ParseFormat(f.Output, render.Table, render.JSON)
	if err != nil {
		return err
	}
	if f.Count < 1 || f.Count > MaxCount {
		return fmt.Errorf("--count %d: want 1 to %d connections", f.Count, MaxCount)
	}
	if f.Parallel < 1 || f.Parallel > 64 {
		return fmt.Errorf("--parallel %d: want 1 to 64", f.Parallel)
	}
	// The client's connections to a NodePort: --from and --cluster-ip are not counters' to choose.
	packet := request.Flags{Node: f.Node, Service: f.Service, Dst: f.Dst}
	if err := packet.Check(); err != nil {
		return err
	}
	ctx := cmd.Context()
	p, err := providers.ForLabFlag(&f.Name, cmd.Flags().Changed("name"))
	if err != nil {
		return err
	}
	pk, err := live.Resolve(ctx, p, f.Name, packet)
	if err != nil {
		return err
	}
	c, err := live.Count(ctx, p, f.Name, pk.Node, pk.Request, f.Count, f.Parallel)
	if err != nil {
		return err
	}
	if format == render.JSON {
		return render.WriteData(streams.Out, render.JSON, c)
	}
	return render.WriteCounted(streams.Out, render.Width(streams.Out), c)
}
