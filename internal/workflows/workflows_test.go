package workflows

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/engines"
	"github.com/rhysd/actionlint"
	"sigs.k8s.io/yaml"
)

const dir = "../../.github/workflows"

// linter is actionlint with shellcheck when it is installed (`make deps` installs it), so the run: scripts are
// checked too.
func linter(t *testing.T) (*actionlint.Linter, *bytes.Buffer) {
	t.Helper()
	opts := &actionlint.LinterOptions{}
	if sc, err := exec.LookPath("shellcheck"); err == nil {
		opts.Shellcheck = sc
	} else {
		t.Logf("shellcheck not installed: run: scripts are not shellchecked (make deps installs it)")
	}
	var out bytes.Buffer
	l, err := actionlint.NewLinter(&out, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l, &out
}

func TestWorkflowsPassActionlint(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no workflows in %s: %v", dir, err)
	}
	l, out := linter(t)
	errs, err := l.LintFiles(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range errs {
		t.Errorf("%s:%d:%d: %s [%s]", e.Filepath, e.Line, e.Column, e.Message, e.Kind)
	}
	if t.Failed() {
		t.Log(out.String())
	}
}

// TestActionlintCatchesMistakes keeps the lint test honest: a workflow with an unknown matrix key, a bad
// expression and a missing runs-on must fail it.
func TestActionlintCatchesMistakes(t *testing.T) {
	bad := `on: push
jobs:
  lab:
    strategy:
      matrix:
        dataplane: [iptables]
    steps:
      - run: echo ${{ matrix.dataplan }}
      - uses: actions/checkout@v4
        with:
          go-version: ${{ github.nope( }}
`
	l, _ := linter(t)
	errs, err := l.Lint("bad.yml", []byte(bad), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(errs) < 3 {
		t.Fatalf("actionlint found %d problems in a broken workflow, want at least 3: %v", len(errs), errs)
	}
}

type workflow struct {
	Jobs map[string]struct {
		Strategy struct {
			Matrix struct {
				Dataplane []string `json:"dataplane"`
			} `json:"matrix"`
		} `json:"strategy"`
		Steps []struct {
			Name string `json:"name"`
			Run  string `json:"run"`
			Uses string `json:"uses"`
			If   string `json:"if"`
		} `json:"steps"`
	} `json:"jobs"`
}

// TestKindWorkflowCoversTheLab checks that the kind workflow runs every dataplane k8sguide knows, and in order
// the lab's whole path: up on kind, deploy, nodeport, trace --verify, down (always), and uploads what it saw.
func TestKindWorkflowCoversTheLab(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(dir, "kind.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var w workflow
	if err := yaml.Unmarshal(data, &w); err != nil {
		t.Fatal(err)
	}
	job, ok := w.Jobs["lab"]
	if !ok {
		t.Fatal("no job named lab")
	}
	var want []string
	for _, d := range engines.Names() {
		want = append(want, string(d))
	}
	if !slices.Equal(job.Strategy.Matrix.Dataplane, want) {
		t.Errorf("matrix dataplanes %v, want %v", job.Strategy.Matrix.Dataplane, want)
	}
	order := []string{"k8sguide up --provider kind", "k8sguide deploy", "k8sguide nodeport", "--verify", "k8sguide down"}
	next := 0
	uploads := false
	for _, s := range job.Steps {
		if next < len(order) && strings.Contains(s.Run, order[next]) {
			if order[next] == "k8sguide down" && s.If != "always()" {
				t.Errorf("down runs only %q: a failed job would leave the cluster", s.If)
			}
			next++
		}
		if strings.HasPrefix(s.Uses, "actions/upload-artifact@") && s.If == "always()" {
			uploads = true
		}
	}
	if next != len(order) {
		t.Errorf("the job's steps do not run %q in order (stopped before %q)", order, order[next])
	}
	if !uploads {
		t.Error("the job does not always upload its traces")
	}
}
