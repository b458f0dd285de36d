package scenarios_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/k8sguide/k8sguide/scenarios"
)

// laughs is a "billion laughs": nine levels of ten aliases each, 10⁹ strings from under 1 KB of YAML. Decoded
// naively it grew past 1 GB in 30 s and reached 21.5 GB (issue 36).
const laughs = `apiVersion: k8sguide.io/v1alpha1
kind: Scenario
metadata:
  name: t
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
steps: [*i]
`

// TestAliasBombIsRefused: a scenario whose aliases would expand it far past what its bytes hold is refused in
// one line, at once and in little memory, as deploy refuses the same trick.
func TestAliasBombIsRefused(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := scenarios.Parse("laughs.yaml", []byte(laughs), nil)
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("still expanding the aliases after 10 s")
	}
	runtime.ReadMemStats(&after)
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "aliases") || !strings.HasPrefix(err.Error(), "laughs.yaml:") {
		t.Fatalf("want one line refusing the aliases, got %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("took %v", d)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Errorf("allocated %d MB to refuse a %d-byte file", grew>>20, len(laughs))
	}
	t.Logf("%v (%d bytes)", err, len(laughs))
}

// TestAliasesAScenarioMayUse: anchors and aliases that repeat a block a few times are YAML a lesson may use.
func TestAliasesAScenarioMayUse(t *testing.T) {
	doc := `apiVersion: k8sguide.io/v1alpha1
kind: Scenario
metadata:
  name: t
steps:
- deploy: {}
- expose: {deployment: web}
- connect: &c
    to: "${node.worker}:${service.web.nodePort}"
    expect: {answered: all}
- connect: *c
- connect: *c
`
	if _, err := scenarios.Parse("t.yaml", []byte(doc), nil); err != nil {
		t.Fatal(err)
	}
}

// TestHugeScenarioFileIsRefused: a scenario file past the limit is refused by its size, in one line naming the
// file, its size and the limit, without reading it; so is a manifest a step names beside it.
func TestHugeScenarioFileIsRefused(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	sparse(t, big, 10<<30)
	_, err := scenarios.LoadFile(big)
	want := big + ": 10240 MB is too big for a scenario (k8sguide reads up to 1.0 MB; the largest shipped lesson is 3 KB)"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	sparse(t, filepath.Join(dir, "huge-manifest.yaml"), 1<<30)
	lesson := filepath.Join(dir, "lesson.yaml")
	os.WriteFile(lesson, []byte(strings.Replace(good, "- deploy: {}", "- deploy: {file: huge-manifest.yaml}", 1)), 0o644)
	_, err = scenarios.LoadFile(lesson)
	// Parse lists every problem, one per line: the first is the step's file.
	if first, _, _ := strings.Cut(fmt.Sprint(err), "\n"); err == nil || !strings.HasSuffix(first, "huge-manifest.yaml: 1024 MB is too big for a lab manifest (k8sguide reads up to 8.0 MB; a manifest of 10,000 Services is about 2 MB)") {
		t.Fatalf("a step's huge manifest: %v", err)
	}
}

func sparse(t *testing.T, path string, size int64) {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
}
