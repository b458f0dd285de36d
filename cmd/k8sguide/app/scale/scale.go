// Package scale implements `k8sguide scale`.
package scale

import (
	"context"
	"errors"
	"fmt"

	"github.com/k8sguide/k8sguide/inspect/live"
	v1 "k8s.io/api/core/v1"

	"github.com/spf13/cobra"

	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/providers"
	"github.com/k8sguide/k8sguide/lab/workload"
)

type flags struct {
	Name       string
	Namespace  string
	Deployment string
	Replicas   int32
}

// NewCommand returns the scale command.
func NewCommand(streams lab.Streams) *cobra.Command {
	f := &flags{}
	cmd := &cobra.Command{
		Use:   "scale --replicas N [DEPLOYMENT]",
		Short: "Scale a Deployment (default: web)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				f.Deployment = args[0]
			}
			if !cmd.Flags().Changed("replicas") {
				return fmt.Errorf("--replicas is required")
			}
			if err := workload.CheckReplicas(f.Replicas); err != nil {
				return err
			}
			p, err := providers.ForLabFlag(&f.Name, cmd.Flags().Changed("name"))
			if err != nil {
				return err
			}
			w, err := p.Workloads(cmd.Context(), f.Name)
			if err != nil {
				return err
			}
			if err := w.Scale(cmd.Context(), f.Namespace, f.Deployment, f.Replicas); err != nil {
				// A pod placed on a node that is down for good: the scale is made, and what the other nodes
				// serve is checked below, the down node named.
				var onDown *workload.PodOnDownNodeError
				if !errors.As(err, &onDown) {
					return err
				}
			}
			scaled := fmt.Sprintf("deployment.apps/%s scaled to %d", f.Deployment, f.Replicas)
			if err := waitServing(cmd.Context(), p, w, f); err != nil {
				var notServing *live.NotServingError
				if errors.As(err, &notServing) {
					// Scaled, and served by every node that could be read: say both.
					fmt.Fprintln(streams.Out, scaled)
				}
				return err
			}
			fmt.Fprintln(streams.Out, scaled)
			return nil
		},
	}
	cmd.Flags().StringVar(&f.Name, "name", "", providers.NameUsage)
	cmd.Flags().StringVarP(&f.Namespace, "namespace", "n", "default", "namespace")
	cmd.Flags().StringVar(&f.Deployment, "deployment", "web", "deployment to scale")
	cmd.Flags().Int32Var(&f.Replicas, "replicas", 0, "replicas wanted")
	return cmd
}

// waitServing returns once every node's dataplane sends the Services of the Deployment's pods to its pods as
// they are now.
func waitServing(ctx context.Context, p lab.Provider, w lab.Workloads, f *flags) error {
	ds, err := w.Deployments(ctx)
	if err != nil {
		return err
	}
	for i := range ds {
		if d := &ds[i]; d.Namespace == f.Namespace && d.Name == f.Deployment {
			return live.WaitServing(ctx, p, f.Name, func(svc *v1.Service) bool { return live.SelectsPodsOf(svc, d) }, live.ServingTimeout)
		}
	}
	return nil
}
