package providers

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/yaml"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/lab"
)

func TestChoose(t *testing.T) {
	ctx := context.Background()
	defer func(f func(context.Context) error) { engineAnswers = f }(engineAnswers)
	for _, tc := range []struct {
		flag    string
		engine  error
		want    string
		wantWhy string
	}{
		{"auto", nil, "kind", "a Docker engine answers"},
		{"auto", errors.New("no Docker engine answers (Cannot connect to the Docker daemon)"), "netns", "Using the netns provider: no Docker engine answers"},
		{"", errors.New("no docker command on PATH"), "netns", "no docker command"},
		{"kind", errors.New("never asked"), "kind", ""},
		{"netns", nil, "netns", ""},
	} {
		engineAnswers = func(context.Context) error { return tc.engine }
		got, why, err := Choose(ctx, tc.flag)
		if err != nil || got != tc.want || !strings.Contains(why, tc.wantWhy) || (tc.wantWhy == "") != (why == "") {
			t.Errorf("Choose(%q) with engine %v = %q, %q, %v; want %q (%q)", tc.flag, tc.engine, got, why, err, tc.want, tc.wantWhy)
		}
	}
	if _, _, err := Choose(ctx, "docker"); err == nil || !strings.Contains(err.Error(), "want auto, kind or netns") {
		t.Errorf("unknown provider: %v", err)
	}
}

// TestDryRun is `up --provider kind --dry-run` for every dataplane: the kind config reads back strictly into
// kind's types with the dataplane's proxy mode, and only ebpf carries Cilium's values.
func TestDryRun(t *testing.T) {
	for _, d := range dataplanes.Names {
		var out bytes.Buffer
		cfg := lab.Config{Name: "k8s-guide", Dataplane: d, Workers: 2}
		if err := DryRun("kind", cfg, "yaml", &out); err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		docs := strings.Split(out.String(), "\n---\n")
		var c v1alpha4.Cluster
		if err := yaml.UnmarshalStrict([]byte(docs[0]), &c); err != nil {
			t.Fatalf("%s: %v\n%s", d, err, docs[0])
		}
		wantMode := map[dataplanes.Name]v1alpha4.ProxyMode{dataplanes.IPTables: "iptables", dataplanes.NFTables: "nftables", dataplanes.IPVS: "ipvs", dataplanes.EBPF: "none"}[d]
		if c.Networking.KubeProxyMode != wantMode || len(c.Nodes) != 3 {
			t.Errorf("%s: mode %q, %d nodes", d, c.Networking.KubeProxyMode, len(c.Nodes))
		}
		if (len(docs) == 2) != (d == dataplanes.EBPF) {
			t.Fatalf("%s: %d documents", d, len(docs))
		}
		if d == dataplanes.EBPF {
			var v map[string]any
			if err := yaml.Unmarshal([]byte(docs[1]), &v); err != nil {
				t.Fatal(err)
			}
			if v["kubeProxyReplacement"] != true || v["k8sServiceHost"] != "k8s-guide-control-plane" || v["k8sServicePort"] != float64(6443) {
				t.Errorf("cilium values %v", v)
			}
			if !strings.Contains(docs[1], "oci://quay.io/cilium/charts/cilium --version 1.20.2") {
				t.Errorf("chart reference missing:\n%s", docs[1])
			}
		}
	}
	var out bytes.Buffer
	if err := DryRun("kind", lab.Config{Name: "x", Dataplane: dataplanes.EBPF, Workers: 1, LBAlgorithm: "maglev"}, "json", &out); err != nil || !strings.Contains(out.String(), `"algorithm": "maglev"`) {
		t.Errorf("json: %v\n%s", err, out.String())
	}
	if err := DryRun("netns", lab.Config{Name: "x", Dataplane: dataplanes.IPTables}, "yaml", &out); err == nil || !strings.Contains(err.Error(), "--provider kind") {
		t.Errorf("netns dry run: %v", err)
	}
	if err := DryRun("kind", lab.Config{Name: "x", Dataplane: dataplanes.IPTables}, "toml", &out); err == nil {
		t.Error("accepted -o toml")
	}
}
