package render

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/inspect/render/graphviz"
)

// TestGraphvizProgram: trace -o svg runs k8sguide-graphviz, which must lay a graph out exactly as Graphviz does
// in process (the golden SVGs are made in process), and say in one line why it cannot.
func TestGraphvizProgram(t *testing.T) {
	if testing.Short() {
		t.Skip("builds k8sguide-graphviz")
	}
	dir := t.TempDir()
	program := filepath.Join(dir, GraphvizName)
	build := exec.Command("go", "build", "-o", program, "github.com/k8sguide/k8sguide/cmd/k8sguide-graphviz")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	const dot = `digraph g { rankdir=LR; a [label="client"]; b [label=<nat/KUBE-SERVICES<BR/>→ KUBE-NODEPORTS>]; a -> b [label="33.33%"]; }`
	want, err := graphviz.SVG(context.Background(), []byte(dot))
	if err != nil {
		t.Fatal(err)
	}

	t.Setenv(GraphvizEnv, program)
	got, err := runGraphviz(context.Background(), dot)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("k8sguide-graphviz's SVG differs from Graphviz's in process:\n%s\n---\n%s", got, want)
	}

	if _, err := runGraphviz(context.Background(), "digraph { a -> "); err == nil || strings.Contains(err.Error(), "\n") {
		t.Errorf("a broken graph: want one line of error, got %v", err)
	}

	t.Setenv(GraphvizEnv, filepath.Join(dir, "nowhere"))
	if _, err := runGraphviz(context.Background(), dot); err == nil || !strings.Contains(err.Error(), GraphvizEnv) {
		t.Errorf("%s naming no file: want an error naming it, got %v", GraphvizEnv, err)
	}

	// Not beside the test binary nor on PATH: the error says how to get it.
	t.Setenv(GraphvizEnv, "")
	t.Setenv("PATH", dir+"/empty")
	if _, err := os.Stat(filepath.Join(filepath.Dir(os.Args[0]), GraphvizName)); err == nil {
		t.Skip("a k8sguide-graphviz lies beside the test binary")
	}
	if _, err := runGraphviz(context.Background(), dot); err == nil || !strings.Contains(err.Error(), "make build") {
		t.Errorf("no k8sguide-graphviz anywhere: want an error saying `make build`, got %v", err)
	}
}
