package datapath

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// compileChild marks the copy of the test binary that compiles into the directory it names, to be SIGKILLed.
const compileChild = "K8SGUIDE_DATAPATH_COMPILE_CHILD"

// pgrep lists the processes whose command line holds s.
func pgrep(s string) []string {
	out, _ := exec.Command("pgrep", "-f", s).Output()
	return strings.Fields(string(out))
}

// TestClangDiesWithItsParent: an ebpf `up` killed while compiling left clang running. A compile is started in a
// child process, which is SIGKILLed once its clang runs: no clang of that compile (found by its unique output
// directory) may remain.
func TestClangDiesWithItsParent(t *testing.T) {
	if dir := os.Getenv(compileChild); dir != "" {
		o := Options{Program: Host, NodeIP: mustAddr("172.18.0.3"), RouterIP: mustAddr("10.244.1.1")}
		Compile(t.Context(), o, dir)
		return
	}
	if _, err := FindClang(); err != nil {
		t.Skipf("no clang to build Cilium's datapath with: %v", err)
	}
	if _, err := Sources(); err != nil {
		t.Skipf("no Cilium sources: %v", err)
	}
	if _, err := exec.LookPath("pgrep"); err != nil {
		t.Skip("no pgrep to look for clang with")
	}
	dir := filepath.Join(t.TempDir(), fmt.Sprintf("k36c-%d", os.Getpid()))
	child := exec.Command(os.Args[0], "-test.run", "^TestClangDiesWithItsParent$")
	child.Env = append(os.Environ(), compileChild+"="+dir)
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, pid := range pgrep(dir) { // never leave a clang behind, whatever the test found
			var p int
			fmt.Sscan(pid, &p)
			syscall.Kill(p, syscall.SIGKILL)
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for len(pgrep(dir)) == 0 {
		if time.Now().After(deadline) {
			child.Process.Kill()
			child.Wait()
			t.Fatal("the child's clang never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	child.Process.Signal(syscall.SIGKILL)
	child.Wait()
	// A compile takes seconds: a clang that outlived its parent is still there well after this.
	var left []string
	for range 25 {
		if left = pgrep(dir); len(left) == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Errorf("clang still running after its parent was SIGKILLed: pids %v", left)
	}
}
