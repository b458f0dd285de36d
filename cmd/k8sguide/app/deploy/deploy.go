// Package deploy implements `k8sguide deploy`.
package deploy

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/k8sguide/k8sguide/inspect/live"
	"github.com/k8sguide/k8sguide/inspect/render"
	"github.com/k8sguide/k8sguide/internal/readcap"
	v1 "k8s.io/api/core/v1"

	"github.com/spf13/cobra"

	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/providers"
	"github.com/k8sguide/k8sguide/lab/workload"
	"github.com/k8sguide/k8sguide/scenarios"
)

type flags struct {
	Name     string
	Replicas int32
}

// NewCommand returns the deploy command.
func NewCommand(streams lab.Streams) *cobra.Command {
	f := &flags{}
	cmd := &cobra.Command{
		Use:   "deploy [FILE|-]",
		Short: "Apply a manifest of Deployments, Services and ConfigMaps (default: the guide's web/nginx Deployment, 3 replicas)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runE(cmd, f, streams, args)
		},
	}
	cmd.Flags().StringVar(&f.Name, "name", "", providers.NameUsage)
	cmd.Flags().Int32Var(&f.Replicas, "replicas", -1, "replicas for every Deployment in the file (default: as the file says)")
	return cmd
}

func runE(cmd *cobra.Command, f *flags, streams lab.Streams, args []string) error {
	data, source := scenarios.Web, "scenario web"
	if len(args) == 1 {
		var err error
		if args[0] == "-" {
			data, err = readcap.Manifest.Reader(streams.In, "standard input")
			source = "standard input"
		} else {
			data, err = readcap.Manifest.File(args[0])
			source = args[0]
		}
		if err != nil {
			return err
		}
	}
	m, err := workload.ParseManifest(data)
	if err != nil {
		return fmt.Errorf("%s: %w", source, err)
	}
	if f.Replicas != -1 {
		if err := workload.CheckReplicas(f.Replicas); err != nil {
			return err
		}
	}
	if f.Replicas >= 0 {
		for _, d := range m.Deployments {
			d.Spec.Replicas = &f.Replicas
		}
	}
	p, err := providers.ForLabFlag(&f.Name, cmd.Flags().Changed("name"))
	if err != nil {
		return err
	}
	w, err := p.Workloads(cmd.Context(), f.Name)
	if err != nil {
		return err
	}
	// What is there already: apply configures it, and says so, as kubectl apply does (deploy said "created"
	// when it replaced the guide's own Deployment).
	existed, err := existing(cmd.Context(), w)
	if err != nil {
		return err
	}
	if err := w.Apply(cmd.Context(), m.ConfigMaps, m.Deployments, m.Services, streams.Err); err != nil {
		return err
	}
	// Return once every node's dataplane sends to the new pods: the Services of the file, and any other that
	// selects the Deployments' pods.
	inFile := map[string]bool{} // thousands of Services: no scan of the file per Service of the lab
	for _, s := range m.Services {
		inFile[s.Namespace+"/"+s.Name] = true
	}
	touched := func(svc *v1.Service) bool {
		if inFile[svc.Namespace+"/"+svc.Name] {
			return true
		}
		for _, d := range m.Deployments {
			if live.SelectsPodsOf(svc, d) {
				return true
			}
		}
		return false
	}
	if err := live.WaitServing(cmd.Context(), p, f.Name, touched, live.ServingTimeout); err != nil {
		var notServing *live.NotServingError
		if errors.As(err, &notServing) {
			// Applied, and served by every node that could be read: say both.
			printApplied(streams.Out, m, existed)
		}
		return err
	}
	printApplied(streams.Out, m, existed)
	return nil
}

// existing are the Deployments and Services the lab holds, as "deployment.apps/NS/NAME" and "service/NS/NAME".
func existing(ctx context.Context, w lab.Workloads) (map[string]bool, error) {
	out := map[string]bool{}
	ds, err := w.Deployments(ctx)
	if err != nil {
		return nil, err
	}
	for _, d := range ds {
		out["deployment.apps/"+d.Namespace+"/"+d.Name] = true
	}
	svcs, err := w.Services(ctx)
	if err != nil {
		return nil, err
	}
	for _, s := range svcs {
		out["service/"+s.Namespace+"/"+s.Name] = true
	}
	return out, nil
}

// printApplied says what the manifest made or changed, as kubectl apply does: created, or configured when it
// was there before.
func printApplied(w io.Writer, m *workload.Manifest, existed map[string]bool) {
	verb := func(key string) string {
		if existed[key] {
			return "configured"
		}
		return "created"
	}
	for _, d := range m.Deployments {
		fmt.Fprintf(w, "deployment.apps/%s %s (%s)\n", d.Name, verb("deployment.apps/"+d.Namespace+"/"+d.Name), render.Count(*d.Spec.Replicas, "replica"))
	}
	for _, s := range m.Services {
		fmt.Fprintf(w, "service/%s %s\n", s.Name, verb("service/"+s.Namespace+"/"+s.Name))
	}
}
