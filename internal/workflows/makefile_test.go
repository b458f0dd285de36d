package workflows

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// repo is the repository's root, where the Makefile is.
const repo = "../.."

// makeOut runs make in the repository with args and returns its status and combined output.
func makeOut(t *testing.T, args ...string) (string, error) {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make on PATH")
	}
	cmd := exec.Command("make", append([]string{"--no-print-directory", "-C", repo}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestMakeLabInstallsOnlyTheLab: `make lab` installs what a lab needs, not the tests' QEMU, VM kernel, shellcheck
// or ipvsadm, and clang only for the ebpf dataplane; it never takes a lab down (GitHub issue 17). The tests'
// tools come with `make test` (as root) and `make deps`. -n prints the recipes; -o build skips the build.
func TestMakeLabInstallsOnlyTheLab(t *testing.T) {
	out, err := makeOut(t, "-n", "-o", "build", "lab", "NAME=mk-test", "DATAPLANE=iptables")
	if err != nil {
		t.Fatalf("make -n lab: %v\n%s", err, out)
	}
	for _, unwanted := range []string{"qemu", "vmkernel", "shellcheck", "ipvsadm", "clang-19", "down --name"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("make lab DATAPLANE=iptables runs %q:\n%s", unwanted, out)
		}
	}
	for _, wanted := range []string{"iptables nftables conntrack", "up --name mk-test"} {
		if !strings.Contains(out, wanted) {
			t.Errorf("make lab does not run %q:\n%s", wanted, out)
		}
	}
	if out, err := makeOut(t, "-n", "-o", "build", "lab", "NAME=mk-test", "DATAPLANE=ebpf"); err != nil || !strings.Contains(out, "clang-19") {
		t.Errorf("make lab DATAPLANE=ebpf installs no clang-19 (%v):\n%s", err, out)
	}
	for _, target := range []string{"deps", "scenarios", "scenarios-ipvs"} {
		out, err := makeOut(t, "-n", "-o", "build", target)
		for _, wanted := range []string{"qemu-system-x86", "vmkernel", "shellcheck", "clang-19"} {
			if err != nil || !strings.Contains(out, wanted) {
				t.Errorf("make %s does not install %q (%v):\n%s", target, wanted, err, out)
			}
		}
	}
	if os.Geteuid() == 0 {
		if out, err := makeOut(t, "-n", "test"); err != nil || !strings.Contains(out, "vmkernel") {
			t.Errorf("make test as root does not install the tests' tools (%v):\n%s", err, out)
		}
	}
}

// TestMakeLabRefusesAnExistingLab: where a lab of that name answers, `make lab` stops with what to do instead of
// taking it down; where none does, it goes on. k8sguide is a script that records its arguments.
func TestMakeLabRefusesAnExistingLab(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "k8sguide")
	script := "#!/bin/sh\necho \"$@\" >> " + filepath.Join(dir, "argv") + "\nexit $FAKE_STATUS\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKE_STATUS", "0")
	out, err := makeOut(t, "-o", "build", "lab-absent", "K8SGUIDE="+fake, "NAME=mk-taken")
	if err == nil || !strings.Contains(out, "make lab: lab mk-taken exists already") || !strings.Contains(out, "make down NAME=mk-taken") {
		t.Errorf("an existing lab: %v\n%s", err, out)
	}
	argv, _ := os.ReadFile(filepath.Join(dir, "argv"))
	if string(argv) != "get nodes --name mk-taken\n" {
		t.Errorf("k8sguide ran with %q", argv)
	}
	t.Setenv("FAKE_STATUS", "1")
	if out, err := makeOut(t, "-o", "build", "lab-absent", "K8SGUIDE="+fake, "NAME=mk-free"); err != nil {
		t.Errorf("no such lab: %v\n%s", err, out)
	}
}

// TestK8sguideDoesNotLinkGraphviz: go-graphviz compiles its WebAssembly Graphviz when a program starts (0.6–0.8 s);
// only k8sguide-graphviz may link it, or every k8sguide command pays that.
func TestK8sguideDoesNotLinkGraphviz(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/k8sguide/k8sguide/cmd/k8sguide").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/goccy/go-graphviz") {
			t.Errorf("k8sguide links %s: lay pictures out with render.Layout, which runs k8sguide-graphviz", pkg)
		}
	}
	out, err = exec.Command("go", "list", "-deps", "github.com/k8sguide/k8sguide/cmd/k8sguide-graphviz").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "github.com/goccy/go-graphviz\n") {
		t.Errorf("k8sguide-graphviz does not link go-graphviz (the check above proves nothing): %v\n%s", err, out)
	}
}
