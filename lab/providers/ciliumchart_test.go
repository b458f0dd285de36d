package providers

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf/chart"
	"github.com/k8sguide/k8sguide/lab"
)

// TestRunCiliumChart: the CLI's side of `k8sguide-lab cilium-chart`, against a stand-in program: the options
// reach it as JSON, its progress reaches the user line by line without its final ERROR line, which becomes the
// error, and its stdout is the answer.
func TestRunCiliumChart(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "k8sguide-lab")
	script := `#!/bin/sh
echo "Pulling Cilium chart" >&2
case "$*" in
*'"ClusterName":"bad"'*) printf 'ERROR: installing Cilium: no\n' >&2; exit 1 ;;
esac
echo "$1 $2 $5 $6"
`
	if err := os.WriteFile(prog, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(lab.LabProgramEnv, prog)

	var progress bytes.Buffer
	out, err := runCiliumChart(context.Background(), &progress, "fetch", chart.Options{Local: true}, "--dir", "/x")
	if err != nil || strings.TrimSpace(out) != "cilium-chart fetch --dir /x" {
		t.Fatalf("fetch: got %q, %v", out, err)
	}
	if progress.String() != "Pulling Cilium chart\n" {
		t.Errorf("progress %q, want the program's progress line", progress.String())
	}
	progress.Reset()
	_, err = runCiliumChart(context.Background(), &progress, "install", chart.Options{ClusterName: "bad"})
	if err == nil || err.Error() != "installing Cilium: no" {
		t.Fatalf("install failing: want its ERROR line as the error, got %v", err)
	}
	if strings.Contains(progress.String(), "ERROR") {
		t.Errorf("progress %q repeats the error", progress.String())
	}
}
