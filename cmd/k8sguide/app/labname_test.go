package app

import (
	"bytes"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/providers"
	"github.com/k8sguide/k8sguide/lab/state"
)

// fakeLabs makes a netns state store holding labs of the given names (a state each, nodes but nothing running)
// and points k8sguide at it, looking at netns labs only: what kind holds on this host stays out of the test.
func fakeLabs(t *testing.T, names ...string) {
	t.Helper()
	s := state.Store{Root: t.TempDir()}
	t.Setenv("K8SGUIDE_STATE_DIR", s.Root)
	t.Setenv(providers.Env, "netns")
	for _, name := range names {
		h, err := s.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		l := &state.Lab{Config: lab.Config{Name: name, Dataplane: "iptables", Workers: 1}, Provider: "netns", Phase: state.Ready}
		for i, n := range lab.NodeNames(name, 1) {
			role := lab.Worker
			if i == 0 {
				role = lab.ControlPlane
			}
			l.Nodes = append(l.Nodes, lab.Node{Name: n, Role: role, IP: "172.18.0." + string(rune('2'+i))})
		}
		if err := h.Save(l); err != nil {
			t.Fatal(err)
		}
		h.Close()
	}
}

func run(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	status := Run(args, strings.NewReader(""), &stdout, &stderr)
	return status, stdout.String(), stderr.String()
}

// labCommands are the commands that target an existing lab, each with arguments that reach the lab.
var labCommands = [][]string{
	{"exec", "worker", "--", "true"},
	{"deploy"},
	{"nodeport"},
	{"lb", "list"},
	{"get", "nodes"},
	{"connect", "10.96.0.1:80"},
	{"scale", "--replicas", "1"},
	{"down"},
	{"kubectl", "get", "nodes"},
	{"node-ip"},
	{"snapshot", "--node", "worker"},
	{"trace", "--dst", "10.96.0.1:80", "--node", "worker"},
}

// TestLabNameDefault: without --name, a command targets the only lab there is, whatever its name; with several,
// it names them and asks; with none, it says there is no k8s-guide, as before (GitHub issue 17).
func TestLabNameDefault(t *testing.T) {
	t.Run("one lab", func(t *testing.T) {
		fakeLabs(t, "solo")
		status, out, errOut := run("node-ip")
		if status != 0 || out != "control-plane:172.18.0.2\nworker:172.18.0.3\n" {
			t.Errorf("node-ip without --name, lab solo alone: status %d\n%s%s", status, out, errOut)
		}
		if status, _, errOut := run("node-ip", "--name", "k8s-guide"); status == 0 || !strings.Contains(errOut, `no lab named "k8s-guide" (known: [solo])`) {
			t.Errorf("an explicit --name is kept: status %d, %s", status, errOut)
		}
	})
	t.Run("several labs", func(t *testing.T) {
		fakeLabs(t, "b-lab", "a-lab")
		for _, args := range labCommands {
			status, out, errOut := run(args...)
			if want := "ERROR: several labs exist (a-lab, b-lab): say which with --name\n"; status != 1 || errOut != want || out != "" {
				t.Errorf("%v: status %d, stdout %q, stderr %q; want %q", args, status, out, errOut, want)
			}
		}
		if status, out, errOut := run("node-ip", "--name", "b-lab", "2"); status != 0 || out != "worker:172.18.0.3\n" {
			t.Errorf("node-ip --name b-lab 2: status %d\n%s%s", status, out, errOut)
		}
	})
	t.Run("no lab", func(t *testing.T) {
		fakeLabs(t)
		for _, args := range labCommands {
			status, _, errOut := run(args...)
			if status != 1 || !strings.Contains(errOut, `no lab named "k8s-guide"`) {
				t.Errorf("%v: status %d, stderr %q", args, status, errOut)
			}
		}
	})
}
