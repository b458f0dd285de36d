// Package providers picks the lab provider for a command.
package providers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf/chart"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/kind"
	"github.com/k8sguide/k8sguide/lab/netns"
	"github.com/k8sguide/k8sguide/lab/state"
)

// Names are the values --provider takes.
var Names = []string{"auto", "kind", "netns"}

// Env, when set, is the default of --provider, and ForLab looks only there: netns tests pin it so a host
// with Docker does not send them to kind.
const Env = "K8SGUIDE_PROVIDER"

// Default is --provider's default: $K8SGUIDE_PROVIDER, else auto.
func Default() string {
	if v := os.Getenv(Env); v != "" {
		return v
	}
	return "auto"
}

// CiliumTimeout is how long `up` waits for Cilium's agents on kind.
const CiliumTimeout = 5 * time.Minute

// engineAnswers is kind.EngineAnswers; tests replace it.
var engineAnswers = kind.EngineAnswers

// Choose resolves --provider: "auto" is kind when a Docker engine answers and netns otherwise. The second
// result says which was chosen and why, for the user.
func Choose(ctx context.Context, name string) (string, string, error) {
	switch name {
	case "netns", "kind":
		return name, "", nil
	case "auto", "":
		if err := engineAnswers(ctx); err != nil {
			return "netns", fmt.Sprintf("Using the netns provider: %v (--provider kind needs one).", err), nil
		}
		return "kind", "Using the kind provider: a Docker engine answers (--provider netns builds the lab without Docker).", nil
	}
	return "", "", fmt.Errorf("unknown provider %q (want auto, kind or netns)", name)
}

// New returns the provider named by --provider, after Choose.
func New(name string) (lab.Provider, error) {
	switch name {
	case "netns":
		return netns.New()
	case "kind":
		return kind.New(installCilium)
	}
	return nil, fmt.Errorf("unknown provider %q (want auto, kind or netns)", name)
}

// installCilium is the ebpf dataplane on kind: Cilium's chart, the release the netns engine compiles.
func installCilium(ctx context.Context, kubeconfig string, cfg lab.Config, progress io.Writer) error {
	return chart.Install(ctx, kubeconfig, CiliumOptions(cfg), CiliumTimeout, progress)
}

// CiliumOptions are the chart options for a lab.
func CiliumOptions(cfg lab.Config) chart.Options {
	return chart.Options{ClusterName: cfg.Name, LBAlgorithm: cfg.LBAlgorithm, NodePortRange: cfg.NodePortRange}
}

// CiliumValues gives the Helm values and chart for `up --dry-run`.
func CiliumValues(cfg lab.Config) (map[string]any, string, error) {
	v, err := chart.Values(CiliumOptions(cfg))
	return v, fmt.Sprintf("%s --version %s", chart.ChartRepo, chart.Version()), err
}

// ForLab returns the provider that holds the named lab: a netns lab of that name, else a kind cluster of that
// name when a Docker engine answers.
func ForLab(name string) (lab.Provider, error) {
	if err := lab.ValidateName(name); err != nil {
		return nil, err
	}
	switch os.Getenv(Env) {
	case "netns":
		return netns.New()
	case "kind":
		return kind.New(installCilium)
	}
	if _, err := state.Default().View(name); err == nil {
		return netns.New()
	} else if !isNotFound(err) {
		return nil, err
	}
	if engineAnswers(context.Background()) == nil {
		k, err := kind.New(installCilium)
		if err != nil {
			return nil, err
		}
		if clusters, err := k.List(context.Background()); err == nil {
			for _, c := range clusters {
				if c == name {
					return k, nil
				}
			}
		}
	}
	// Neither has it: netns says so, with the labs it knows.
	return netns.New()
}

func isNotFound(err error) bool {
	var nf *lab.NotFoundError
	return errors.As(err, &nf) || errors.Is(err, os.ErrNotExist)
}

// DryRun prints, for --provider kind, the kind config and Helm values `up` would use, as YAML or JSON; it
// needs no Docker.
func DryRun(provider string, cfg lab.Config, format string, out io.Writer) error {
	if provider != "kind" {
		return fmt.Errorf("--dry-run shows the kind config: use it with --provider kind (the netns lab has no config to show)")
	}
	pl, err := kind.MakePlan(cfg, CiliumValues)
	if err != nil {
		return err
	}
	var data []byte
	switch format {
	case "yaml", "":
		data, err = pl.YAML()
	case "json":
		data, err = json.MarshalIndent(pl, "", "  ")
		data = append(data, '\n')
	default:
		return fmt.Errorf("-o %q: want yaml or json", format)
	}
	if err != nil {
		return err
	}
	_, err = out.Write(data)
	return err
}
