package render_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/inspect/render"
	"github.com/k8sguide/k8sguide/internal/graphviztest"
)

// TestGraphvizProgram: trace -o svg runs k8sguide-graphviz, which must lay a graph out exactly as Graphviz does
// in process (the golden SVGs are made in process), and say in one line why it cannot.
func TestGraphvizProgram(t *testing.T) {
	program := graphviztest.Build(t)
	dir := filepath.Dir(program)
	const dot = `digraph g { rankdir=LR; a [label="client"]; b [label=<nat/KUBE-SERVICES<BR/>→ KUBE-NODEPORTS>]; a -> b [label="33.33%"]; }`

	t.Setenv(render.GraphvizEnv, program)
	first, err := render.Layout(context.Background(), dot)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<svg", ">client</text>", ">nat/KUBE&#45;SERVICES</text>", ">33.33%</text>"} {
		if !bytes.Contains(first, []byte(want)) {
			t.Errorf("the SVG has no %s:\n%s", want, first)
		}
	}
	// The second run reads the compiled module from the cache (the test's, see graphviztest).
	cache := os.Getenv(render.GraphvizCacheEnv)
	if entries, err := os.ReadDir(filepath.Join(cache, "go-graphviz")); err != nil || len(entries) == 0 {
		t.Errorf("no compilation cache under %s: %v", cache, err)
	}
	if again, err := render.Layout(context.Background(), dot); err != nil || !bytes.Equal(again, first) {
		t.Errorf("a second layout (from the cache) differs: %v", err)
	}

	if _, err := render.Layout(context.Background(), "digraph { a -> "); err == nil || strings.Contains(err.Error(), "\n") {
		t.Errorf("a broken graph: want one line of error, got %v", err)
	}

	t.Setenv(render.GraphvizEnv, filepath.Join(dir, "nowhere"))
	if _, err := render.Layout(context.Background(), dot); err == nil || !strings.Contains(err.Error(), render.GraphvizEnv) {
		t.Errorf("%s naming no file: want an error naming it, got %v", render.GraphvizEnv, err)
	}

	// Not beside the test binary nor on PATH: the error says how to get it.
	t.Setenv(render.GraphvizEnv, "")
	t.Setenv("PATH", dir+"/empty")
	if _, err := os.Stat(filepath.Join(filepath.Dir(os.Args[0]), render.GraphvizName)); err == nil {
		t.Skip("a k8sguide-graphviz lies beside the test binary")
	}
	if _, err := render.Layout(context.Background(), dot); err == nil || !strings.Contains(err.Error(), "make build") {
		t.Errorf("no k8sguide-graphviz anywhere: want an error saying `make build`, got %v", err)
	}
}
