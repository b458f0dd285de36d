package run

import (
	"slices"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/scenarios"
)

// TestGroupJobs: the shipped lessons that ask for the default lab share one lab per dataplane, named after the
// dataplane; a lesson whose lab has a shape of its own (NodePort range or addresses, Maglev) keeps its own lab,
// named after it; --lab-per-lesson, --keep, --keep-on-failure and --explain give every cell its own.
func TestGroupJobs(t *testing.T) {
	list, err := scenarios.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	var jobs []job
	for _, s := range list {
		for _, dp := range s.DataplanesOf() {
			if dp != "ipvs" {
				jobs = append(jobs, job{s, dp, len(jobs)})
			}
		}
	}
	groups := groupJobs(jobs, Options{LabPrefix: "scn"})
	cells := 0
	shared := map[string][]string{}
	for _, g := range groups {
		cells += len(g.jobs)
		dp := g.jobs[0].dp
		var names []string
		for _, j := range g.jobs {
			names = append(names, j.s.Metadata.Name)
			if j.dp != dp {
				t.Errorf("group %s holds %s on %s and %s on %s", g.lab, g.jobs[0].s.Metadata.Name, dp, j.s.Metadata.Name, j.dp)
			}
			if up, first := (&cellRun{s: j.s, dp: j.dp}).upArgs(), (&cellRun{s: g.jobs[0].s, dp: dp}).upArgs(); !slices.Equal(up, first) {
				t.Errorf("group %s: %s asks for up %v, %s for %v", g.lab, j.s.Metadata.Name, up, g.jobs[0].s.Metadata.Name, first)
			}
		}
		if len(g.jobs) > 1 {
			shared[g.lab] = names
		} else if g.lab != "" {
			t.Errorf("a group of one cell (%s on %s) is named %q: it keeps its lesson's lab name", names[0], dp, g.lab)
		}
	}
	if cells != len(jobs) {
		t.Errorf("%d cells in the groups, want %d", cells, len(jobs))
	}
	// The six lessons of the default lab, on each of the three dataplanes.
	want := []string{"churn", "clusterip", "local-traffic", "no-endpoints", "nodeport", "session-affinity"}
	for _, lab := range []string{"scn-lessons-ipt", "scn-lessons-nft", "scn-lessons-ebpf"} {
		got := slices.Sorted(slices.Values(shared[lab]))
		if !slices.Equal(got, want) {
			t.Errorf("shared lab %s runs %v, want %v", lab, got, want)
		}
	}
	if len(shared) != 3 {
		t.Errorf("shared labs %v, want the three of the default lab", shared)
	}
	for _, g := range groups {
		for _, j := range g.jobs {
			if j.s.Lab.NodePortRange != "" || len(j.s.Lab.NodePortAddresses) > 0 || j.s.Lab.LBAlgorithm != "" {
				if len(g.jobs) != 1 {
					t.Errorf("%s on %s (a lab of its own shape) shares lab %s", j.s.Metadata.Name, j.dp, g.lab)
				}
			}
		}
	}

	for _, o := range []Options{{LabPerLesson: true}, {Keep: true}, {KeepOnFailure: true}, {Explain: &Explain{Out: &strings.Builder{}}}} {
		if g := groupJobs(jobs, o); len(g) != len(jobs) {
			t.Errorf("options %+v: %d groups for %d cells, want one each", o, len(g), len(jobs))
		}
	}
}

// TestDiffersFrom: scenario run --lab runs a lesson only on a lab of the shape it asks for, and says what differs.
func TestDiffersFrom(t *testing.T) {
	list, err := scenarios.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	lesson := map[string]*scenarios.Scenario{}
	for _, s := range list {
		lesson[s.Metadata.Name] = s
	}
	threeNodes := []lab.Node{{Name: "cp"}, {Name: "w1"}, {Name: "w2"}}
	ipt := &lab.Status{Name: "l", Dataplane: "iptables", Nodes: threeNodes, NodePortRange: lab.DefaultNodePortRange}
	random := &lab.Status{Name: "l", Dataplane: "ebpf", Nodes: threeNodes, NodePortRange: lab.DefaultNodePortRange, LBAlgorithm: "random"}
	maglev := &lab.Status{Name: "l", Dataplane: "ebpf", Nodes: threeNodes, NodePortRange: lab.DefaultNodePortRange, LBAlgorithm: "maglev"}
	unknown := &lab.Status{Name: "l", Dataplane: "ebpf", Nodes: threeNodes}
	for _, tc := range []struct {
		lesson, dp string
		lab        *lab.Status
		want       string
	}{
		{"nodeport", "iptables", ipt, ""},
		{"local-traffic", "iptables", ipt, ""},
		{"nodeport", "ebpf", random, ""},
		{"maglev", "ebpf", maglev, ""},
		{"nodeport", "ebpf", maglev, "LB algorithm random (the lab's: maglev)"},
		{"maglev", "ebpf", random, "LB algorithm maglev (the lab's: random)"},
		{"nodeport", "ebpf", unknown, "NodePort range 30000-32767 (the lab's: not known), LB algorithm random (the lab's: not known)"},
		{"nodeport", "nftables", ipt, "dataplane nftables (the lab's: iptables)"},
		{"nodeport-range", "iptables", ipt, "NodePort range "},
		{"nodeport-addresses", "iptables", ipt, "NodePort addresses "},
		{"nodeport", "iptables", &lab.Status{Dataplane: "iptables", Nodes: threeNodes[:1], NodePortRange: lab.DefaultNodePortRange}, "2 workers (the lab has 0)"},
	} {
		s := lesson[tc.lesson]
		if s == nil {
			t.Fatalf("no shipped lesson %s", tc.lesson)
		}
		got := (&cellRun{s: s, dp: tc.dp}).differsFrom(tc.lab)
		if tc.want == "" && got != "" || tc.want != "" && !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s on %s, lab %+v: %q, want %q", tc.lesson, tc.dp, tc.lab, got, tc.want)
		}
	}
}
