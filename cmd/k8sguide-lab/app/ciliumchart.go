package app

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf/chart"
	"github.com/k8sguide/k8sguide/dataplanes/ebpf/chart/helminstall"
	"github.com/k8sguide/k8sguide/lab"
)

// ciliumChartCommand is `cilium-chart fetch|install`: Helm's side of `k8sguide up --provider kind --dataplane
// ebpf` (lab/providers runs it). Both take the chart options as JSON (--options); progress goes to stderr, the
// last line of which is "ERROR: …" when they fail.
//
//	fetch --dir DIR: the chart (Cilium's source, or pulled from chart.ChartRepo and saved in DIR); its path on stdout.
//	install --chart PATH --kubeconfig FILE --timeout D: installs it and waits for the agents and the operator.
func ciliumChartCommand() *cobra.Command {
	var optionsJSON, dir, chartPath, kubeconfig string
	var timeout time.Duration
	options := func() (chart.Options, error) {
		var o chart.Options
		if err := json.Unmarshal([]byte(optionsJSON), &o); err != nil {
			return o, fmt.Errorf("--options: %v", err)
		}
		return o, nil
	}
	cmd := &cobra.Command{Use: lab.LabCiliumChart, Hidden: true, Short: "fetch or install Cilium's chart with Helm (k8sguide up runs it)"}
	fetch := &cobra.Command{
		Use:  "fetch",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			o, err := options()
			if err != nil {
				return err
			}
			ch, err := helminstall.Fetch(c.Context(), o, os.Stderr) // checked: Cilium's chart at chart.Version()
			if err != nil {
				return err
			}
			// Cilium's own source is already a chart directory install can load; a pulled chart is saved.
			var path string
			if o.Local {
				path, err = chart.SourceChartDir()
			} else if path, err = chartutil.Save(ch, dir); err != nil {
				err = fmt.Errorf("keeping the Cilium chart: %v", err)
			}
			if err != nil {
				return err
			}
			fmt.Println(path)
			return nil
		},
	}
	fetch.Flags().StringVar(&dir, "dir", os.TempDir(), "where a pulled chart is saved")
	install := &cobra.Command{
		Use:  "install",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			o, err := options()
			if err != nil {
				return err
			}
			ch, err := helminstall.LoadChart(chartPath)
			if err != nil {
				return fmt.Errorf("installing Cilium: %v", err)
			}
			return helminstall.InstallChart(c.Context(), kubeconfig, ch, o, timeout, os.Stderr)
		},
	}
	install.Flags().StringVar(&chartPath, "chart", "", "the chart fetch gave")
	install.Flags().StringVar(&kubeconfig, "kubeconfig", "", "the cluster's kubeconfig")
	install.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait for the agents and the operator")
	for _, c := range []*cobra.Command{fetch, install} {
		c.Flags().StringVar(&optionsJSON, "options", "{}", "the chart options (chart.Options) as JSON")
		cmd.AddCommand(c)
	}
	return cmd
}
