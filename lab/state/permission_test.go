package state

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// unreadableEnv, set, makes TestUnreadableStore the child that reads the store as nobody.
const unreadableEnv = "K8SGUIDE_STATE_TEST_UNREADABLE"

// TestUnreadableStore: a user who is not root reads a store that is root's (/run/k8sguide is 0700). Every
// read says, in one line, that k8sguide needs root, where the bare "open …/state.json: permission denied"
// left the user to guess (GitHub issue 17). As root, permissions do not bite: the test runs itself again as
// nobody.
func TestUnreadableStore(t *testing.T) {
	if root := os.Getenv(unreadableEnv); root != "" {
		checkUnreadable(t, Store{Root: root})
		return
	}
	s := Store{Root: filepath.Join(t.TempDir(), "k8sguide")}
	h, err := s.Create("lab1")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Save(&Lab{Phase: Ready}); err != nil {
		t.Fatal(err)
	}
	h.Close()
	if os.Geteuid() != 0 {
		if err := os.Chmod(s.Root, 0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(s.Root, 0o700) })
		checkUnreadable(t, s)
		return
	}
	// The test binary sits in a directory of root's; nobody runs a copy.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "k8sguide-state-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "state.test")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestUnreadableStore$", "-test.v")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), unreadableEnv+"="+s.Root)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestUnreadableStore") {
		t.Fatalf("as nobody, the test did not run:\n%s", out)
	}
}

// checkUnreadable reads s, which this process may not read, every way a command does.
func checkUnreadable(t *testing.T, s Store) {
	_, readErr := s.Read("lab1")
	_, viewErr := s.View("lab1")
	_, listErr := s.List()
	_, lockErr := s.Lock("lab1")
	for what, err := range map[string]error{"Read": readErr, "View": viewErr, "List": listErr, "Lock": lockErr} {
		if err == nil {
			t.Errorf("%s of an unreadable store: no error", what)
			continue
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "k8sguide needs root to read the netns labs' state ("+s.Root) ||
			!strings.HasSuffix(msg, "): run it with sudo") || !errors.Is(err, fs.ErrPermission) {
			t.Errorf("%s of an unreadable store: %v", what, err)
		}
	}
}

// TestNeedsRoot is the mapping alone: only a permission error becomes "needs root".
func TestNeedsRoot(t *testing.T) {
	denied := &fs.PathError{Op: "open", Path: "/run/k8sguide/a/state.json", Err: fs.ErrPermission}
	err := needsRoot(denied, "/run/k8sguide/a/state.json")
	want := "k8sguide needs root to read the netns labs' state (/run/k8sguide/a/state.json): run it with sudo"
	if err == nil || err.Error() != want || !errors.Is(err, fs.ErrPermission) {
		t.Errorf("permission denied: %v, want %q (wrapping fs.ErrPermission)", err, want)
	}
	if err := needsRoot(syscall.EACCES, "/x"); err == nil || !strings.Contains(err.Error(), "needs root") {
		t.Errorf("EACCES: %v", err)
	}
	other := errors.New("disk on fire")
	if err := needsRoot(other, "/x"); err != other {
		t.Errorf("other error: %v", err)
	}
	if err := needsRoot(nil, "/x"); err != nil {
		t.Errorf("nil: %v", err)
	}
}
