// Package up implements `k8sguide up`.
package up

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/k8sguide/k8sguide/lab"
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
}

// NewCommand returns the up command.
func NewCommand(streams lab.Streams) *cobra.Command {
	f := &flags{}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Create a lab: one control-plane node and N workers with the chosen Service dataplane",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runE(cmd, f, streams)
		},
	}
	cmd.Flags().StringVar(&f.Name, "name", lab.DefaultName, "lab name (prefixes node names)")
	cmd.Flags().StringVar(&f.Provider, "provider", "netns", "lab provider: "+strings.Join(providers.Names, ", "))
	cmd.Flags().StringVar(&f.Dataplane, "dataplane", string(lab.IPTables), "Service dataplane: iptables, nftables, ipvs, ebpf")
	cmd.Flags().IntVar(&f.Workers, "workers", 2, "number of worker nodes")
	cmd.Flags().StringVar(&f.NodePortRange, "service-node-port-range", lab.DefaultNodePortRange, "apiserver --service-node-port-range")
	cmd.Flags().StringSliceVar(&f.NodePortAddresses, "nodeport-addresses", nil, "kube-proxy --nodeport-addresses: CIDRs whose local addresses serve NodePorts (default: all)")
	cmd.Flags().StringVar(&f.LBAlgorithm, "lb-algorithm", "", "ebpf dataplane: Cilium's --bpf-lb-algorithm, random (default) or maglev")
	return cmd
}

func runE(cmd *cobra.Command, f *flags, streams lab.Streams) error {
	d, err := lab.ParseDataplane(f.Dataplane)
	if err != nil {
		return err
	}
	p, err := providers.New(f.Provider)
	if err != nil {
		return err
	}
	return p.Create(cmd.Context(), lab.Config{
		Name:              f.Name,
		Dataplane:         d,
		Workers:           f.Workers,
		NodePortRange:     f.NodePortRange,
		NodePortAddresses: f.NodePortAddresses,
		LBAlgorithm:       f.LBAlgorithm,
	}, streams.Err)
}
