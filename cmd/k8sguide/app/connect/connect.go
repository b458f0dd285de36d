// Package connect implements `k8sguide connect`.
package connect

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/live"
	"github.com/k8sguide/k8sguide/inspect/render"
	"github.com/k8sguide/k8sguide/inspect/request"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/providers"
)

// MaxCount and MaxParallel bound --count and --parallel: each connection is a process started in the lab.
const (
	MaxCount    = 10000
	MaxParallel = 100
)

type flags struct {
	Name     string
	From     string
	Node     string
	Count    int
	Parallel int
	Output   string
}

// Result is `connect -o json`: where the connections went from and to, and what each did.
type Result struct {
	From        string             `json:"from"`
	Node        string             `json:"node,omitempty"`
	Dst         string             `json:"dst"`
	Connections []trace.Connection `json:"connections"`
}

// NewCommand returns the connect command.
func NewCommand(streams lab.Streams) *cobra.Command {
	f := &flags{}
	cmd := &cobra.Command{
		Use:   "connect IP:PORT [--from client|node|pod/NAME] [--count N]",
		Short: "Make real connections to an address from the client, a node or a pod, and see which pod answered each and the source it saw",
		Example: `  k8sguide connect 172.18.0.4:30080 --count 10
  k8sguide connect 10.96.0.10:80 --from pod/web-7d8f9c-abcde`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			format, err := render.ParseFormat(f.Output, render.Table, render.JSON)
			if err != nil {
				return err
			}
			// Bad input first: it needs no lab to be refused.
			if _, err := trace.ParseDst(args[0]); err != nil {
				return err // the address is an argument, not --dst
			}
			if err := (request.Flags{Dst: args[0], From: f.From}).Check(); err != nil {
				return err
			}
			if f.Count < 1 || f.Count > MaxCount {
				return fmt.Errorf("--count %d: want 1 to %d connections", f.Count, MaxCount)
			}
			if f.Parallel < 1 || f.Parallel > MaxParallel {
				return fmt.Errorf("--parallel %d: want 1 to %d connections at once", f.Parallel, MaxParallel)
			}
			if f.Node != "" && f.From != "node" {
				return fmt.Errorf("--node is where --from node connections start: give --from node")
			}
			p, err := providers.ForLabFlag(&f.Name, cmd.Flags().Changed("name"))
			if err != nil {
				return err
			}
			// Status first, --node or not: it says when there is no such lab, which a connection from the client
			// would report as a connection that failed.
			st, err := p.Status(cmd.Context(), f.Name)
			if err != nil {
				return err
			}
			node := f.Node
			if node != "" {
				if node, err = lab.ResolveNode(st.NodeNames(), f.Name, node); err != nil {
					return err
				}
			}
			if _, _, ok := lab.PodRef(f.From); ok {
				// The pod the connections start from, by name, for the table's header (--from pod/web: one of
				// web's pods).
				if f.From, err = live.PodOf(cmd.Context(), p, f.Name, f.From); err != nil {
					return err
				}
			}
			conns, err := live.Connections(cmd.Context(), p, f.Name, f.From, node, args[0], f.Count, f.Parallel)
			if err != nil && (len(conns) == 0 || cmd.Context().Err() == nil) {
				return err
			}
			// Interrupted part-way: what was made is shown, and the error says it was not all.
			r := Result{From: orClient(f.From), Node: node, Dst: args[0], Connections: conns}
			if format == render.JSON {
				err = render.WriteData(streams.Out, format, r)
			} else {
				err = render.Connections(streams.Out, r.From+" "+r.Node, r.Dst, r.Connections)
			}
			if err != nil {
				return err
			}
			if len(conns) < f.Count {
				return fmt.Errorf("interrupted: %d of %d connections made (shown above)", len(conns), f.Count)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&f.Name, "name", "", providers.NameUsage)
	cmd.Flags().StringVar(&f.From, "from", "client", "where the connections start: client, node (with --node) or pod/NAME (a pod, or one of the Deployment NAME)")
	cmd.Flags().StringVar(&f.Node, "node", "", "with --from node: the node")
	cmd.Flags().IntVar(&f.Count, "count", 1, "connections to make")
	cmd.Flags().IntVar(&f.Parallel, "parallel", 1, "connections under way at once (1: one after another, so each follows what the node remembers of the last, as with session affinity)")
	cmd.Flags().StringVarP(&f.Output, "output", "o", "table", "table or json")
	return cmd
}

func orClient(from string) string {
	if from == "" {
		return "client"
	}
	return from
}
