package lab

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFindProgram: a companion program is found beside k8sguide, or through its variable; missing, the error
// says how to get it, in one line.
func TestFindProgram(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "k8sguide")
	t.Setenv("PATH", t.TempDir()) // nothing there
	t.Setenv(LabProgramEnv, "")
	_, err := FindLabProgram(exe)
	if err == nil || !strings.Contains(err.Error(), "make build") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("no k8sguide-lab anywhere: want one line saying make build, got %v", err)
	}
	beside := filepath.Join(dir, LabProgram)
	if err := os.WriteFile(beside, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := FindLabProgram(exe); err != nil || got != beside {
		t.Fatalf("k8sguide-lab beside k8sguide: got %q, %v; want %q", got, err, beside)
	}
	t.Setenv(LabProgramEnv, filepath.Join(dir, "elsewhere"))
	if _, err := FindLabProgram(exe); err == nil || !strings.Contains(err.Error(), LabProgramEnv) {
		t.Fatalf("$%s naming nothing: want an error naming it, got %v", LabProgramEnv, err)
	}
}
