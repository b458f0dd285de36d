package registrytest_test

import (
	"bytes"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/engines"
	"github.com/k8sguide/k8sguide/dataplanes/iptables"
	"github.com/k8sguide/k8sguide/inspect/render"
	"github.com/k8sguide/k8sguide/inspect/stages"
	"github.com/k8sguide/k8sguide/inspect/tracer"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/kind"
	"github.com/k8sguide/k8sguide/scenarios"
	"github.com/k8sguide/k8sguide/scenarios/run"
)

// fifth is a dataplane the product has never heard of, added as CONTRIBUTING.md's recipe says: an engine with all
// its faces and a line in the registry. Its faces other than Name and Lab are the iptables engine's (the test is
// of the registry, not of a new walk), so its traces are real walks of a real node's rules.
type fifth struct{ iptables.Engine }

const fifthName dataplanes.Name = "fifth"

func (fifth) Name() dataplanes.Name { return fifthName }

func (fifth) Lab() dataplanes.Lab {
	return dataplanes.Lab{
		Title:         "Fifth proxy (a test engine)",
		Short:         "5th",
		KubeProxyMode: "iptables",
		Aliases:       []dataplanes.Alias{{Name: "five", Node: []string{"iptables-save", "-t", "nat"}}},
	}
}

// withFifth registers fifth first in the registry (so that it, not iptables, reads an iptables-save dump), for
// the test's length.
func withFifth(t *testing.T) {
	saved := engines.All
	engines.All = append([]dataplanes.Engine{fifth{}}, saved...)
	t.Cleanup(func() { engines.All = saved })
}

// TestFifthDataplane takes a fifth dataplane through everything that names dataplanes: --dataplane and a lab's
// config, the providers' faces, the tracer on a pasted dump, the guide's stages and their sentences, the
// renderers, and the scenario loader and runner. Nothing outside its folder and the registry line knows it.
func TestFifthDataplane(t *testing.T) {
	withFifth(t)

	// --dataplane, a lab's config, the kind provider's proxy mode, the guide's aliases.
	if _, err := engines.Parse("fifth"); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(engines.List(), "fifth, iptables") {
		t.Errorf("List: %s", engines.List())
	}
	cfg := lab.Config{Name: "t", Dataplane: fifthName, Workers: 2}
	if err := cfg.Validate(5); err != nil {
		t.Errorf("Validate: %v", err)
	}
	if mode, err := kind.ProxyMode(fifthName); err != nil || mode != "iptables" {
		t.Errorf("kind.ProxyMode: %q, %v", mode, err)
	}
	if got, want := lab.GuideAliases("t", fifthName, 2), []string{"alias five='k8sguide exec --name t t-worker2 -- iptables-save -t nat'"}; !slices.Equal(got, want) {
		t.Errorf("GuideAliases: %q, want %q", got, want)
	}

	// The tracer on a pasted dump (a netns lab's iptables-save; dataplanes/iptables/testdata/README.md).
	raw, err := os.ReadFile("../../dataplanes/iptables/testdata/iptables-worker.save")
	if err != nil {
		t.Fatal(err)
	}
	s, err := tracer.Load(raw, []netip.Addr{netip.MustParseAddr("172.18.0.3")})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tracer.Trace(s, tracer.Request{Dst: "172.18.0.3:31103", Src: "172.18.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Dataplane != string(fifthName) || len(tr.Paths) != 3 {
		t.Fatalf("trace: dataplane %q, %d paths; want fifth's, to the Service's 3 endpoints", tr.Dataplane, len(tr.Paths))
	}

	// The guide's stages: the engine's own sentences (its Explainer), none empty.
	for _, st := range stages.Of(tr) {
		if st.Guide == "" {
			t.Errorf("stage %s: no sentence (its text: %q)", st.Key, st.Text)
		}
	}

	// The renderers: the table names the dataplane, the picture titles it with its face.
	var table bytes.Buffer
	if err := render.Trace(&table, tr, render.TraceOptions{Width: 100}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "fifth") {
		t.Errorf("the trace table does not name the dataplane:\n%s", table.String())
	}
	if dot := render.TraceDOT(tr); !strings.Contains(dot, "Fifth proxy (a test engine)") {
		t.Errorf("the picture does not title the dataplane with its face:\n%s", dot)
	}

	// The scenario loader (the schema's enum and the dataplanes: entries) and the runner's lab names.
	const scenario = `apiVersion: k8sguide.io/v1alpha1
kind: Scenario
metadata: {name: t}
lab: {dataplanes: [iptables, fifth]}
steps:
- deploy: {}
- expose: {deployment: web}
- connect:
    to: "${node.worker}:${service.web.nodePort}"
    expect: {answered: all}
    dataplanes:
      kind/fifth: {known: "a test engine runs on no provider"}
`
	sc, err := scenarios.Parse("t.yaml", []byte(scenario), nil)
	if err != nil {
		t.Fatalf("the scenario loader refuses the fifth dataplane: %v", err)
	}
	if got := sc.DataplanesOf(); !slices.Equal(got, []string{"iptables", "fifth"}) {
		t.Errorf("DataplanesOf: %q", got)
	}
	if got := run.LabName("scn", "nodeport", "fifth"); got != "scn-nodeport-5th" {
		t.Errorf("LabName: %s", got)
	}
}

// TestUnknownDataplaneIsRefused: a name no engine has is refused where a user gives it, never taken for iptables.
func TestUnknownDataplaneIsRefused(t *testing.T) {
	if _, err := engines.Parse("fifth"); err == nil {
		t.Error("Parse accepted a dataplane no engine has")
	}
	cfg := lab.Config{Name: "t", Dataplane: fifthName, Workers: 2}
	if err := cfg.Validate(5); err == nil {
		t.Error("Validate accepted a dataplane no engine has")
	}
	if _, err := kind.ProxyMode(fifthName); err == nil {
		t.Error("kind.ProxyMode accepted a dataplane no engine has")
	}
	if _, err := scenarios.Parse("t.yaml", []byte("apiVersion: k8sguide.io/v1alpha1\nkind: Scenario\nmetadata: {name: t}\nlab: {dataplanes: [fifth]}\nsteps:\n- deploy: {}\n"), nil); err == nil {
		t.Error("the scenario loader accepted a dataplane no engine has")
	}
}
