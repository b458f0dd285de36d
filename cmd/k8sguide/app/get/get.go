// Package get implements `k8sguide get nodes|pods|services|endpoints`.
package get

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/k8sguide/k8sguide/inspect/render"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/providers"
)

type flags struct {
	Name   string
	Output string
}

// resources maps each accepted name (kubectl's short names too) to its canonical one.
var resources = map[string]string{
	"nodes": "nodes", "node": "nodes", "no": "nodes",
	"pods": "pods", "pod": "pods", "po": "pods",
	"services": "services", "service": "services", "svc": "services",
	"endpoints": "endpoints", "endpoint": "endpoints", "ep": "endpoints",
	"endpointslices": "endpointslices", "endpointslice": "endpointslices",
	"deployments": "deployments", "deployment": "deployments", "deploy": "deployments",
}

// NewCommand returns the get command.
func NewCommand(streams lab.Streams) *cobra.Command {
	f := &flags{}
	cmd := &cobra.Command{
		Use:       "get nodes|pods|services|endpoints|endpointslices|deployments",
		Short:     "List a lab's nodes or Kubernetes objects",
		Args:      cobra.ExactArgs(1),
		ValidArgs: []string{"nodes", "pods", "services", "endpoints", "endpointslices", "deployments"},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runE(cmd, f, streams, args[0])
		},
	}
	cmd.Flags().StringVar(&f.Name, "name", "", providers.NameUsage)
	cmd.Flags().StringVarP(&f.Output, "output", "o", "table", "output format: table, json or yaml")
	return cmd
}

func runE(cmd *cobra.Command, f *flags, streams lab.Streams, what string) error {
	resource, ok := resources[what]
	if !ok {
		return fmt.Errorf("unknown resource %q (want nodes, pods, services, endpoints, endpointslices or deployments)", what)
	}
	format, err := render.ParseFormat(f.Output, render.Table, render.JSON, render.YAML)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	p, err := providers.ForLabFlag(&f.Name, cmd.Flags().Changed("name"))
	if err != nil {
		return err
	}
	if resource == "nodes" {
		s, err := p.Status(ctx, f.Name)
		if err != nil {
			return err
		}
		if format == render.Table {
			return writeNodes(streams.Out, s)
		}
		return render.WriteData(streams.Out, format, s)
	}
	w, err := p.Workloads(ctx, f.Name)
	if err != nil {
		return err
	}
	now := time.Now()
	switch resource {
	case "pods":
		pods, err := w.Pods(ctx)
		if err != nil {
			return err
		}
		if format == render.Table {
			return render.Pods(streams.Out, pods, now)
		}
		return render.WriteData(streams.Out, format, render.List(pods))
	case "services":
		svcs, err := w.Services(ctx)
		if err != nil {
			return err
		}
		if format == render.Table {
			return render.Services(streams.Out, svcs, now)
		}
		return render.WriteData(streams.Out, format, render.List(svcs))
	case "deployments":
		ds, err := w.Deployments(ctx)
		if err != nil {
			return err
		}
		if format == render.Table {
			return render.Deployments(streams.Out, ds, now)
		}
		return render.WriteData(streams.Out, format, render.List(ds))
	default: // endpoints, endpointslices
		slices, err := w.EndpointSlices(ctx)
		if err != nil {
			return err
		}
		if format == render.Table {
			return render.Endpoints(streams.Out, slices, now)
		}
		return render.WriteData(streams.Out, format, render.List(slices))
	}
}

// writeNodes prints a lab's nodes like `kubectl get nodes -o wide`, with the node's proxy state.
func writeNodes(w io.Writer, s lab.Status) error {
	var rows [][]string
	for _, n := range s.Nodes {
		proxy := string(s.Dataplane)
		if ps, ok := s.Proxies[n.Name]; ok && !ps.Running {
			proxy += " (stopped)"
		}
		rows = append(rows, []string{n.Name, string(n.Role), n.IP, n.PodCIDR, proxy})
	}
	return render.WriteTable(w, []string{"NAME", "ROLES", "INTERNAL-IP", "POD-CIDR", "PROXY"}, rows)
}
