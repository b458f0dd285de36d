package tracer_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/k8sguide/k8sguide/internal/e2etest"
)

// BenchmarkStart is what every command pays before it does anything: `k8sguide --help`, the whole process,
// beside the floor of a Go program that prints a line (the Go runtime's own start), medians of 9 runs of
// each, interleaved. It was 115 MB and 85 ms of CPU while the CLI linked the lab's programs.
func BenchmarkStart(b *testing.B) {
	e2etest.NeedRoot(b) // e2etest.Main builds the Binary as root
	hello := buildHello(b)
	var figs []e2etest.Figures
	for i := 0; i < b.N; i++ {
		var err error
		if figs, err = e2etest.Medians(9, []string{e2etest.Binary, "--help"}, []string{hello}); err != nil {
			b.Fatal(err)
		}
	}
	e2etest.ReportFigures(b, 0, figs[0], figs[1])
}

// buildHello builds the floor of BenchmarkStart: a Go program that prints a line, as k8sguide is built.
func buildHello(b *testing.B) string {
	b.Helper()
	dir := b.TempDir()
	src := filepath.Join(dir, "hello.go")
	if err := os.WriteFile(src, []byte("package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello\") }\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	bin := filepath.Join(dir, "hello")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, src)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building the floor: %v: %s", err, out)
	}
	return bin
}
