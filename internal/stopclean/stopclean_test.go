package stopclean

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

const childEnv = "STOPCLEAN_TEST_DIR"

// TestMain is, with childEnv set, a process that registers what to remove and waits to be stopped.
func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		made, kept := filepath.Join(dir, "made"), filepath.Join(dir, "kept")
		os.Mkdir(made, 0o755)
		os.Mkdir(kept, 0o755)
		Remove(made)
		Remove(kept)
		Forget(kept) // removed by its owner already, in a real run
		First(func() { os.WriteFile(filepath.Join(dir, "first-ran"), nil, 0o644) })
		os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644)
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A process stopped by SIGTERM or SIGINT runs the hooks, removes what it registered and not what it forgot, and
// exits with status 2.
func TestStopRemoves(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		dir := t.TempDir()
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), childEnv+"="+dir)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
				break
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				t.Fatal("the child never got ready")
			}
		}
		cmd.Process.Signal(sig)
		err := cmd.Wait()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("%v: the child ended with %v, want exit status 2", sig, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "made")); !os.IsNotExist(err) {
			t.Errorf("%v: a registered path was left (%v)", sig, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "kept")); err != nil {
			t.Errorf("%v: a forgotten path was removed (%v)", sig, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "first-ran")); err != nil {
			t.Errorf("%v: the First hook did not run (%v)", sig, err)
		}
	}
}
