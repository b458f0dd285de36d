package scenarios_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/scenarios"
)

func TestBuiltinScenariosAreValid(t *testing.T) {
	all, err := scenarios.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) == 0 {
		t.Fatal("no shipped scenarios")
	}
	for _, s := range all {
		if !strings.HasSuffix(s.File, s.Metadata.Name+".yaml") {
			t.Errorf("%s: metadata.name %q: name the file after the scenario", s.File, s.Metadata.Name)
		}
	}
}

const good = `apiVersion: k8sguide.io/v1alpha1
kind: Scenario
metadata:
  name: t
steps:
- deploy: {}
- expose: {deployment: web}
- connect:
    to: "${node.worker}:${service.web.nodePort}"
    expect: {answered: all}
`

// TestMalformedScenariosAreRefusedWithTheLine changes one line of a valid scenario at a time.
func TestMalformedScenariosAreRefusedWithTheLine(t *testing.T) {
	if _, err := scenarios.Parse("t.yaml", []byte(good), nil); err != nil {
		t.Fatalf("the valid scenario: %v", err)
	}
	for _, c := range []struct {
		name, from, to string
		want           string // the whole first line of the error
	}{
		{"unknown field", "  name: t", "  name: t\n  nmae: u", "t.yaml:5: metadata: additional properties 'nmae' not allowed"},
		{"unknown step field", "- expose: {deployment: web}", "- expose: {deployment: web, nodeport: 30080}", "t.yaml:7: steps.1.expose: additional properties 'nodeport' not allowed"},
		{"unknown dataplane", "  name: t", "  name: t\nlab:\n  dataplanes: [iptables, cillium]", "t.yaml:6: lab.dataplanes.1: value must be one of 'iptables', 'nftables', 'ipvs', 'ebpf'"},
		{"dataplane the lab does not run", "    expect: {answered: all}", "    expect: {answered: all}\n    dataplanes:\n      ebpf: {expect: {answered: none}, reason: r}\nlab: {dataplanes: [iptables]}", "t.yaml:8: dataplanes: ebpf: the scenario runs on iptables only"},
		{"a provider's dataplane the lab does not run", "    expect: {answered: all}", "    expect: {answered: all}\n    dataplanes:\n      kind/ebpf: {expect: {answered: none}, reason: r}\nlab: {dataplanes: [iptables]}", "t.yaml:8: dataplanes: ebpf: the scenario runs on iptables only"},
		{"unknown provider", "    expect: {answered: all}", "    expect: {answered: all}\n    dataplanes:\n      docker/ebpf: {expect: {answered: none}, reason: r}", "t.yaml:12: steps.2.connect.dataplanes: additional properties 'docker/ebpf' not allowed"},
		{"bad reference", "${node.worker}", "${node.worker3}", "t.yaml:8: to: ${node.worker3}: the lab's nodes are control-plane, worker, worker2"},
		{"unknown reference form", "${node.worker}", "${nodes.worker}", "t.yaml:8: to: ${nodes.worker}: want ${client}, ${node.NODE}, ${service.NAME.clusterIP|nodePort|port} or ${pod.DEPLOYMENT@NODE}"},
		{"reference to no Service", "${service.web.nodePort}", "${service.webb.nodePort}", "t.yaml:8: to: ${service.webb.nodePort}: no step makes a Service webb"},
		{"two actions in a step", "- expose: {deployment: web}", "- expose: {deployment: web}\n  scale: {deployment: web, replicas: 1}", "t.yaml:7: a step does exactly one of deploy, scale, expose, delete, wait, connect, trace, object"},
		{"wrong type", "    expect: {answered: all}", "    expect: {answered: many}", "t.yaml:10: steps.2.connect.expect.answered: none of its forms fits: got string, want integer; or value must be one of 'all', 'none'"},
		{"bad yaml", "  name: t", "  name: [t", "t.yaml:4: did not find expected ',' or ']'"},
		{"bad yaml: a tab", "  name: t", "  name: t\n\tx: 1", "t.yaml:4: found a tab character that violates indentation"},
		{"wrong apiVersion", "k8sguide.io/v1alpha1", "k8sguide.io/v1", "t.yaml:1: apiVersion: value must be 'k8sguide.io/v1alpha1'"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bad := strings.Replace(good, c.from, c.to, 1)
			if bad == good {
				t.Fatalf("%q is not in the scenario", c.from)
			}
			_, err := scenarios.Parse("t.yaml", []byte(bad), nil)
			if err == nil {
				t.Fatalf("accepted:\n%s", bad)
			}
			if first := strings.Split(err.Error(), "\n")[0]; first != c.want {
				t.Errorf("error:\n got %s\nwant %s\n(all: %v)", first, c.want, err)
			}
		})
	}
}

// A PROVIDER/DATAPLANE entry holds on that provider's labs only, before the dataplane's own.
func TestForDataplaneProvider(t *testing.T) {
	e := func(s string) *string { return &s }
	m := map[string]scenarios.Differs[string]{
		"ebpf":      {Known: "the netns lab drops"},
		"kind/ebpf": {Expect: e("rejected"), Reason: "Cilium's default answers"},
	}
	for _, c := range []struct{ provider, dp, want, reason, known string }{
		{"kind", "ebpf", "rejected", "Cilium's default answers", ""},
		{"netns", "ebpf", "base", "", "the netns lab drops"},
		{"", "ebpf", "base", "", "the netns lab drops"},
		{"kind", "iptables", "base", "", ""},
	} {
		want, reason, known := scenarios.ForDataplane("base", m, c.provider, c.dp)
		if want != c.want || reason != c.reason || known != c.known {
			t.Errorf("%s/%s: got %q %q %q", c.provider, c.dp, want, reason, known)
		}
	}
}

// TestSchemaFileNamesEveryEngine: the schema file an editor reads in place (the lessons' yaml-language-server
// line) lists the dataplanes Load accepts, which Schema writes from the engines.
func TestSchemaFileNamesEveryEngine(t *testing.T) {
	if got, want := scenarios.Schema(), scenarios.SchemaFile(); !bytes.Equal(got, want) {
		t.Errorf("scenario.schema.json's dataplane enum is not the engines' (%s): write it as Schema does", strings.Join(scenarios.Dataplanes(), ", "))
	}
}
