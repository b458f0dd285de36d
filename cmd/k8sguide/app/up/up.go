// Package up implements `k8sguide up`.
package up

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/spf13/cobra"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/engines"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/kubeconfig"
	"github.com/k8sguide/k8sguide/lab/providers"
)

type flags struct {
	Name              string
	Provider          string
	Dataplane         string
	Workers           int
	NodePortRange     string
	NodePortAddresses []string
	LBAlgorithm       string
	Image             string
	KubernetesVersion string
	Kubeconfig        string
	Retain            bool
	DryRun            bool
	Output            string
}

// NewCommand returns the up command.
func NewCommand(streams lab.Streams) *cobra.Command {
	f := &flags{}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Create a lab: one control-plane node and N workers with the chosen Service dataplane",
		Example: "  k8sguide up --dataplane nftables\n" +
			"  k8sguide up --provider kind --dataplane ebpf --dry-run -o yaml",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runE(cmd, f, streams)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.Name, "name", lab.DefaultName, "lab name (prefixes node names)")
	fl.StringVar(&f.Provider, "provider", providers.Default(), "lab provider: "+strings.Join(providers.Names, ", ")+" (auto: kind when a Docker engine answers, else netns; default from $"+providers.Env+")")
	fl.StringVar(&f.Dataplane, "dataplane", string(dataplanes.IPTables), "Service dataplane: "+engines.List())
	fl.IntVar(&f.Workers, "workers", 2, "number of worker nodes")
	fl.StringVar(&f.NodePortRange, "service-node-port-range", lab.DefaultNodePortRange, "apiserver --service-node-port-range")
	fl.StringSliceVar(&f.NodePortAddresses, "nodeport-addresses", nil, "kube-proxy --nodeport-addresses: CIDRs whose local addresses serve NodePorts (default: all)")
	fl.StringVar(&f.LBAlgorithm, "lb-algorithm", "", "ebpf dataplane: Cilium's --bpf-lb-algorithm, random (default) or maglev")
	fl.StringVar(&f.Image, "image", "", "kind: node image (default: Kubernetes 1.36.4, pinned by digest)")
	fl.StringVar(&f.KubernetesVersion, "kubernetes-version", "", "kind: pick the node image by Kubernetes version instead of --image")
	fl.StringVar(&f.Kubeconfig, "kubeconfig", "", "where to write the lab's context (default as kind: $KUBECONFIG, else ~/.kube/config)")
	fl.BoolVar(&f.Retain, "retain", false, "kind: keep the cluster if creating it fails, for debugging")
	fl.BoolVar(&f.DryRun, "dry-run", false, "kind: print the kind config (and Cilium's Helm values) instead of creating anything")
	fl.StringVarP(&f.Output, "output", "o", "yaml", "with --dry-run: yaml or json")
	return cmd
}

func runE(cmd *cobra.Command, f *flags, streams lab.Streams) error {
	d, err := engines.Parse(f.Dataplane)
	if err != nil {
		return err
	}
	cfg := lab.Config{
		Name:              f.Name,
		Dataplane:         d,
		Workers:           f.Workers,
		NodePortRange:     f.NodePortRange,
		NodePortAddresses: f.NodePortAddresses,
		LBAlgorithm:       f.LBAlgorithm,
		Image:             f.Image,
		KubernetesVersion: f.KubernetesVersion,
		Kubeconfig:        f.Kubeconfig,
		Retain:            f.Retain,
	}
	provider, why, err := providers.Choose(cmd.Context(), f.Provider)
	if err != nil {
		return err
	}
	if !f.DryRun {
		// Refused before anything is built: a file that is not a kubeconfig is not overwritten, and a lab
		// that could not be written to it would be made for nothing.
		// A file this user may not read is left to the provider, whose first word is then what the user
		// lacks (root, for a netns lab).
		if err := kubeconfig.Check(kubeconfig.Path(cfg.Kubeconfig)); err != nil && !errors.Is(err, fs.ErrPermission) {
			return err
		}
	}
	if f.DryRun {
		return providers.DryRun(provider, cfg, f.Output, streams.Out)
	}
	if why != "" {
		fmt.Fprintln(streams.Err, why)
	}
	p, err := providers.New(provider)
	if err != nil {
		return err
	}
	return p.Create(cmd.Context(), cfg, streams.Err)
}
