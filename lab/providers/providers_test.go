package providers

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"

	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/yaml"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/engines"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/state"
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
	for _, d := range engines.Names() {
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

// TestLabName: --name given is kept; not given, the only lab (netns or kind) is the one, none is
// lab.DefaultName, several is an error naming them (GitHub issue 17).
func TestLabName(t *testing.T) {
	ctx := context.Background()
	defer func(e func(context.Context) error, n func() ([]string, error), k func(context.Context) ([]string, error)) {
		engineAnswers, netnsLabs, kindLabs = e, n, k
	}(engineAnswers, netnsLabs, kindLabs)
	denied := &state.NeedsRootError{Path: "/run/k8sguide", Err: fs.ErrPermission}
	for _, tc := range []struct {
		name        string
		env         string
		netns, kind []string
		netnsErr    error
		docker      bool
		flag        string
		set         bool
		want        string
		wantErr     string
	}{
		{name: "given", netns: []string{"a", "b"}, flag: "b", set: true, want: "b"},
		{name: "given, not there", netns: []string{"a"}, flag: "zz", set: true, want: "zz"},
		{name: "given, store unreadable", netnsErr: denied, flag: "zz", set: true, want: "zz"},
		{name: "no lab", docker: true, flag: lab.DefaultName, want: lab.DefaultName},
		{name: "one netns lab", netns: []string{"ipt"}, flag: lab.DefaultName, want: "ipt"},
		{name: "one kind lab", kind: []string{"kc"}, docker: true, flag: lab.DefaultName, want: "kc"},
		{name: "kind unasked without an engine", netns: []string{"ipt"}, kind: []string{"kc"}, want: "ipt"},
		{name: "one of each", netns: []string{"ipt"}, kind: []string{"kc"}, docker: true, wantErr: "several labs exist (ipt, kc): say which with --name"},
		{name: "several netns labs", netns: []string{"rough1", "ipt", "k8s-guide"}, wantErr: "several labs exist (ipt, k8s-guide, rough1): say which with --name"},
		{name: "one name on both", netns: []string{"x"}, kind: []string{"x"}, docker: true, want: "x"},
		{name: "empty --name is no --name", netns: []string{"ipt"}, flag: "", set: true, want: "ipt"},
		{name: "unreadable store", netnsErr: denied, kind: []string{"kc"}, docker: true, wantErr: "needs root"},
		{name: "K8SGUIDE_PROVIDER=netns", env: "netns", netns: []string{"ipt"}, kind: []string{"kc"}, docker: true, want: "ipt"},
		{name: "K8SGUIDE_PROVIDER=kind", env: "kind", netnsErr: denied, kind: []string{"kc"}, docker: true, want: "kc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(Env, tc.env)
			netnsLabs = func() ([]string, error) { return tc.netns, tc.netnsErr }
			kindLabs = func(context.Context) ([]string, error) { return tc.kind, nil }
			engineAnswers = func(context.Context) error {
				if tc.docker {
					return nil
				}
				return errors.New("no Docker engine answers")
			}
			got, err := LabName(ctx, tc.flag, tc.set)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %q, %v; want error %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestForLabFlag: the resolved name is written back for the command to use.
func TestForLabFlag(t *testing.T) {
	defer func(n func() ([]string, error)) { netnsLabs = n }(netnsLabs)
	t.Setenv(Env, "netns")
	netnsLabs = func() ([]string, error) { return []string{"solo"}, nil }
	name := lab.DefaultName
	if _, err := ForLabFlag(&name, false); err != nil || name != "solo" {
		t.Errorf("not given: %q, %v", name, err)
	}
	name = "other"
	if _, err := ForLabFlag(&name, true); err != nil || name != "other" {
		t.Errorf("given: %q, %v", name, err)
	}
	netnsLabs = func() ([]string, error) { return []string{"a", "b"}, nil }
	name = lab.DefaultName
	if _, err := ForLabFlag(&name, false); err == nil || name != lab.DefaultName {
		t.Errorf("several: %q, %v", name, err)
	}
}
