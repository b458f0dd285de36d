package kind

import (
	"bytes"
	"fmt"

	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/yaml"

	"github.com/k8sguide/k8sguide/lab"
)

// Plan is what `up --provider kind` hands kind and, for the ebpf dataplane, Helm. `up --dry-run` prints it
// without touching Docker.
type Plan struct {
	Cluster *v1alpha4.Cluster `json:"cluster"`
	// CiliumValues are the Helm values Cilium is installed with (ebpf only).
	CiliumValues map[string]any `json:"ciliumValues,omitempty"`
	// CiliumChart names the chart and version.
	CiliumChart string `json:"ciliumChart,omitempty"`
	// Warning says when the node image is not pinned by digest.
	Warning string `json:"warning,omitempty"`
}

// CiliumValuesFunc gives the Helm values and chart reference for a lab (dataplanes/ebpf/chart).
type CiliumValuesFunc func(cfg lab.Config) (values map[string]any, chart string, err error)

// MakePlan validates cfg and builds the plan.
func MakePlan(cfg lab.Config, cilium CiliumValuesFunc) (*Plan, error) {
	if err := Validate(&cfg); err != nil {
		return nil, err
	}
	image, _, warning, err := NodeImage(cfg.Image, cfg.KubernetesVersion)
	if err != nil {
		return nil, err
	}
	c, err := ClusterConfig(cfg, image)
	if err != nil {
		return nil, err
	}
	pl := &Plan{Cluster: c, Warning: warning}
	if lab.RunsCilium(cfg.Dataplane) {
		if cilium == nil {
			return nil, fmt.Errorf("this build cannot install Cilium")
		}
		if pl.CiliumValues, pl.CiliumChart, err = cilium(cfg); err != nil {
			return nil, err
		}
	}
	return pl, nil
}

// YAML is the plan as the files a user would hand kind and Helm: the kind config, then (ebpf) the Helm values,
// as two YAML documents with a comment saying what each is.
func (pl *Plan) YAML() ([]byte, error) {
	var b bytes.Buffer
	if pl.Warning != "" {
		fmt.Fprintf(&b, "# Note: %s\n", pl.Warning)
	}
	b.WriteString("# kind create cluster --config <this document>\n")
	c, err := yaml.Marshal(pl.Cluster)
	if err != nil {
		return nil, err
	}
	b.Write(c)
	if pl.CiliumValues != nil {
		fmt.Fprintf(&b, "---\n# helm install cilium %s --namespace kube-system --values <this document>\n", pl.CiliumChart)
		v, err := yaml.Marshal(pl.CiliumValues)
		if err != nil {
			return nil, err
		}
		b.Write(v)
	}
	return b.Bytes(), nil
}
