package chart

import (
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf/datapath"
)

func TestVersion(t *testing.T) {
	if got := Version(); got != "1.20.2" || "v"+got != datapath.CiliumVersion {
		t.Fatalf("Version() = %q, want datapath.CiliumVersion %q without the v", got, datapath.CiliumVersion)
	}
}

func TestValues(t *testing.T) {
	v, err := Values(Options{ClusterName: "k8sguide", LBAlgorithm: "maglev", NodePortRange: "30000-32767"})
	if err != nil {
		t.Fatal(err)
	}
	if v["kubeProxyReplacement"] != true || v["k8sServiceHost"] != "k8sguide-control-plane" || v["k8sServicePort"] != 6443 {
		t.Errorf("kube-proxy replacement values wrong: %v", v)
	}
	if got := v["loadBalancer"].(map[string]any)["algorithm"]; got != "maglev" {
		t.Errorf("loadBalancer.algorithm = %v, want maglev", got)
	}
	if got := v["nodePort"].(map[string]any)["range"]; got != "30000,32767" {
		t.Errorf("nodePort.range = %v, want the chart's format 30000,32767", got)
	}

	// Unset options leave Cilium's defaults alone: no key at all.
	v, err = Values(Options{ClusterName: "kind"})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"loadBalancer", "nodePort"} {
		if _, ok := v[k]; ok {
			t.Errorf("Values with no %s option sets %s = %v", k, k, v[k])
		}
	}

	bad := map[string]Options{
		"no cluster name":     {},
		"upper-case cluster":  {ClusterName: "Kind"},
		"cluster with dot":    {ClusterName: "a.b"},
		"bogus algorithm":     {ClusterName: "kind", LBAlgorithm: "bogus"},
		"Maglev capitalised":  {ClusterName: "kind", LBAlgorithm: "Maglev"},
		"chart's range form":  {ClusterName: "kind", NodePortRange: "30000,32767"},
		"reversed range":      {ClusterName: "kind", NodePortRange: "32767-30000"},
		"empty range":         {ClusterName: "kind", NodePortRange: "30000-30000"},
		"port 0":              {ClusterName: "kind", NodePortRange: "0-100"},
		"port above 65535":    {ClusterName: "kind", NodePortRange: "30000-70000"},
		"not numbers":         {ClusterName: "kind", NodePortRange: "a-b"},
		"single port":         {ClusterName: "kind", NodePortRange: "30000"},
		"negative lower port": {ClusterName: "kind", NodePortRange: "-1-100"},
	}
	for name, o := range bad {
		if v, err := Values(o); err == nil {
			t.Errorf("%s: Values(%+v) = %v, want an error", name, o, v)
		} else if strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error is not one line: %q", name, err)
		}
	}
}
