package helminstall

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf/chart"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	kubefake "helm.sh/helm/v4/pkg/kube/fake"
	rcommon "helm.sh/helm/v4/pkg/release/common"
	release "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage"
	"helm.sh/helm/v4/pkg/storage/driver"
)

// installOrUpgrade with Helm's real install and upgrade actions, an in-memory release store and a kube
// client that accepts everything: first `up` installs, the next upgrades with the new values only.
func TestInstallOrUpgrade(t *testing.T) {
	dir := chartDir(t)
	kv, err := common.ParseKubeVersion(renderKubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	caps := common.DefaultCapabilities.Copy()
	caps.KubeVersion = *kv
	mem := driver.NewMemory()
	mem.SetNamespace(chart.Namespace)
	cfg := action.NewConfiguration()
	cfg.Releases = storage.Init(mem)
	cfg.KubeClient = &kubefake.PrintingKubeClient{Out: io.Discard, LogOutput: io.Discard}
	cfg.Capabilities = caps

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	up := func(o chart.Options) *release.Release {
		t.Helper()
		ch, err := LoadChart(dir)
		if err != nil {
			t.Fatal(err)
		}
		vals, err := chart.Values(o)
		if err != nil {
			t.Fatal(err)
		}
		var log strings.Builder
		if err := installOrUpgrade(ctx, cfg, ch, vals, &log); err != nil {
			t.Fatalf("installOrUpgrade(%+v): %v", o, err)
		}
		r, err := cfg.Releases.Last(chart.ReleaseName)
		if err != nil {
			t.Fatal(err)
		}
		return r.(*release.Release)
	}

	r := up(chart.Options{ClusterName: "kind", LBAlgorithm: "maglev", NodePortRange: "30000-32767"})
	if r.Version != 1 || r.Info.Status != rcommon.StatusDeployed || r.Namespace != chart.Namespace {
		t.Fatalf("first run: revision %d %s in %q, want revision 1 deployed in %s", r.Version, r.Info.Status, r.Namespace, chart.Namespace)
	}
	if !strings.Contains(r.Manifest, `  bpf-lb-algorithm: "maglev"`) || !strings.Contains(r.Manifest, `  node-port-range: "30000,32767"`) {
		t.Error("first run's manifest lacks bpf-lb-algorithm maglev or node-port-range 30000,32767")
	}

	// The second run upgrades, and options it leaves unset go back to Cilium's defaults (values reset).
	r = up(chart.Options{ClusterName: "kind"})
	if r.Version != 2 || r.Info.Status != rcommon.StatusDeployed {
		t.Fatalf("second run: revision %d %s, want revision 2 deployed", r.Version, r.Info.Status)
	}
	if strings.Contains(r.Manifest, "  bpf-lb-algorithm: ") || strings.Contains(r.Manifest, "  node-port-range: ") {
		t.Error("upgrade kept the previous run's LB algorithm or NodePort range")
	}
	if _, ok := r.Config["loadBalancer"]; ok {
		t.Errorf("upgraded release's values still hold loadBalancer: %v", r.Config["loadBalancer"])
	}

	// An interrupted run leaves the release pending: say so rather than Helm's generic error.
	r.SetStatus(rcommon.StatusPendingUpgrade, "interrupted")
	if err := cfg.Releases.Update(r); err != nil {
		t.Fatal(err)
	}
	ch, err := LoadChart(dir)
	if err != nil {
		t.Fatal(err)
	}
	vals, _ := chart.Values(chart.Options{ClusterName: "kind"})
	err = installOrUpgrade(ctx, cfg, ch, vals, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "pending-upgrade") || !strings.Contains(err.Error(), "interrupted") {
		t.Errorf("installOrUpgrade over a pending release = %v", err)
	}
}
