package helminstall

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	helmchart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	release "helm.sh/helm/v4/pkg/release/v1"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf/chart"
)

// withoutCapabilities sets vals' securityContext.capabilities to the chart's lists without drop (nothing when
// drop is empty).
func withoutCapabilities(ch *helmchart.Chart, vals map[string]any, drop []string) error {
	if len(drop) == 0 {
		return nil
	}
	sc, _ := ch.Values["securityContext"].(map[string]any)
	caps, ok := sc["capabilities"].(map[string]any)
	if !ok {
		return fmt.Errorf("the Cilium chart has no securityContext.capabilities to remove %s from", strings.Join(drop, ", "))
	}
	out := map[string]any{}
	for name, list := range caps {
		items, ok := list.([]any)
		if !ok {
			continue
		}
		kept := []any{}
		for _, c := range items {
			if s, ok := c.(string); !ok || !slices.Contains(drop, s) {
				kept = append(kept, c)
			}
		}
		out[name] = kept
	}
	vals["securityContext"] = map[string]any{"capabilities": out}
	return nil
}

// LoadChart loads a Cilium chart directory or .tgz and checks it is Cilium's chart at chart.Version().
func LoadChart(path string) (*helmchart.Chart, error) {
	ch, err := loader.Load(path)
	if err != nil {
		return nil, fmt.Errorf("loading Cilium chart %s: %w", path, err)
	}
	return ch, checkChart(ch, path)
}

func checkChart(ch *helmchart.Chart, from string) error {
	if ch.Metadata == nil || ch.Metadata.Name != "cilium" || ch.Metadata.Version != chart.Version() {
		name, version := "", ""
		if ch.Metadata != nil {
			name, version = ch.Metadata.Name, ch.Metadata.Version
		}
		return fmt.Errorf("%s holds chart %q version %q, want \"cilium\" version %q", from, name, version, chart.Version())
	}
	return nil
}

// renderKubeVersion is the Kubernetes version a client-side render assumes (the chart requires >= 1.21;
// Helm's own default in tests is 1.20). It is the line of k8s.io/client-go the lab is built with, which is
// the kind node image's line too.
const renderKubeVersion = "v1.36.0"

// Render renders the Cilium chart at chartPath (a directory or .tgz; see chart.SourceChartDir) with chart.Values(o)
// client-side, as `helm template` does: no cluster, and the values are validated against the chart's
// values.schema.json. It returns the manifest (YAML documents, each preceded by "# Source:").
func Render(chartPath string, o chart.Options) (string, error) {
	vals, err := chart.Values(o)
	if err != nil {
		return "", err
	}
	ch, err := LoadChart(chartPath)
	if err != nil {
		return "", err
	}
	if err := withoutCapabilities(ch, vals, o.WithoutCapabilities); err != nil {
		return "", err
	}
	return render(ch, vals)
}

// render is Helm's install action in client-only dry-run mode: the same values coalescing, schema
// validation and template engine as Install, with fake capabilities and an in-memory release store.
func render(ch *helmchart.Chart, vals map[string]any) (string, error) {
	kv, err := common.ParseKubeVersion(renderKubeVersion)
	if err != nil {
		return "", err
	}
	in := action.NewInstall(action.NewConfiguration())
	in.DryRunStrategy = action.DryRunClient
	in.ReleaseName = chart.ReleaseName
	in.Namespace = chart.Namespace
	in.KubeVersion = kv
	in.Replace = true // client-only: nothing to clash with
	rel, err := in.Run(ch, vals)
	if err != nil {
		return "", fmt.Errorf("rendering Cilium chart %s: %s", chart.Version(), oneLine(err))
	}
	r, ok := rel.(*release.Release)
	if !ok {
		return "", fmt.Errorf("rendering Cilium chart %s: unexpected release type %T", chart.Version(), rel)
	}
	return r.Manifest, nil
}

// oneLine folds an error's lines (Helm's schema and template errors span several) into one.
func oneLine(err error) string {
	var b bytes.Buffer
	for _, l := range strings.Split(err.Error(), "\n") {
		if l = strings.TrimSpace(l); l == "" {
			continue
		}
		if b.Len() > 0 {
			if bytes.HasSuffix(b.Bytes(), []byte(":")) {
				b.WriteString(" ")
			} else {
				b.WriteString("; ")
			}
		}
		b.WriteString(l)
	}
	return b.String()
}
