package ebpf

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf/datapath"
)

// ciliumSources returns the Cilium source tree and a clang that can build its datapath, or skips the test
// saying which is missing.
func ciliumSources(t *testing.T) (src string, clang datapath.Clang) {
	t.Helper()
	clang, err := datapath.FindClang()
	if err != nil {
		t.Skipf("no clang to build Cilium's datapath with: %v", err)
	}
	src, err = datapath.Sources()
	if err != nil {
		t.Skipf("no Cilium sources: %v", err)
	}
	return src, clang
}

// compileProbe builds one of testdata's small BPF programs against Cilium's headers (argv, no shell).
func compileProbe(t *testing.T, name string) string {
	t.Helper()
	src, clang := ciliumSources(t)
	in, err := filepath.Abs(filepath.Join("testdata", name+".c"))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), name+".o")
	cmd := exec.Command(clang.Path, "-O2", "-g", "--target=bpf", "-std=gnu99", "-nostdinc", "-mcpu=v3",
		"-I"+filepath.Join(src, "bpf"), "-I"+filepath.Join(src, "bpf", "include"),
		"-Wall", "-Wextra", "-Werror", "-c", in, "-o", out)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, stderr.String())
	}
	return out
}

// needRoot skips tests that load programs into the kernel.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loading BPF programs and maps needs root (CAP_BPF, CAP_NET_ADMIN)")
	}
}
