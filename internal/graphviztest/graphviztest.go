// Package graphviztest builds, for a test, the k8sguide-graphviz that trace -o svg|html runs. Tests lay pictures
// out through the program, as k8sguide does, rather than linking Graphviz: go-graphviz writes its WebAssembly
// compilation cache into $TMPDIR when a program that links it starts, before a test could point it elsewhere.
package graphviztest

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// Build builds k8sguide-graphviz into the test's directory and returns its path; its compilation cache (which
// k8sguide keeps under the user's cache directory) stays in the test's directory too.
func Build(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	program := filepath.Join(dir, "k8sguide-graphviz")
	build := exec.Command("go", "build", "-o", program, "github.com/k8sguide/k8sguide/cmd/k8sguide-graphviz")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building k8sguide-graphviz: %v\n%s", err, out)
	}
	t.Setenv("K8SGUIDE_GRAPHVIZ_CACHE", filepath.Join(dir, "cache")) // render.GraphvizCacheEnv
	return program
}
