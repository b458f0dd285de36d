package privdir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// nobody is the uid other users' files are given here.
const nobody = 65534

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: files owned by another user are made with chown")
	}
}

// sharedTmp is a directory like /tmp: world-writable and sticky.
func sharedTmp(t *testing.T) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "tmp")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestEnsureMakesPrivateDirectory(t *testing.T) {
	dir := filepath.Join(sharedTmp(t), "k8sguide", "cilium-1")
	if err := Ensure(dir); err != nil {
		t.Fatalf("Ensure(%s): %v", dir, err)
	}
	for _, d := range []string{dir, filepath.Dir(dir)} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v, want 0700", d, fi.Mode().Perm())
		}
	}
	// Again, existing: still fine.
	if err := Ensure(dir); err != nil {
		t.Fatalf("Ensure(%s) again: %v", dir, err)
	}
	if err := Check(dir); err != nil {
		t.Fatalf("Check(%s): %v", dir, err)
	}
}

// The campaign's case: with HOME unset, another user made the cache's parent in /tmp first.
func TestEnsureRefusesDirectoryMadeFirstByAnotherUser(t *testing.T) {
	needRoot(t)
	tmp := sharedTmp(t)
	planted := filepath.Join(tmp, "k8sguide")
	if err := os.Mkdir(planted, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(planted, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	err := Ensure(filepath.Join(planted, "cilium-1"))
	if err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Fatalf("Ensure under a directory of uid %d: %v, want a refusal naming the owner", nobody, err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error is not one line: %q", err)
	}
	if _, serr := os.Stat(filepath.Join(planted, "cilium-1")); serr == nil {
		t.Errorf("Ensure made a directory inside another user's directory")
	}
	// The cache directory itself planted (its parent ours): refused too.
	mine := filepath.Join(tmp, "mine")
	if err := Ensure(mine); err != nil {
		t.Fatal(err)
	}
	theirs := filepath.Join(mine, "cache")
	if err := os.Mkdir(theirs, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(theirs, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	if err := Ensure(theirs); err == nil {
		t.Errorf("Ensure accepted a cache directory owned by uid %d", nobody)
	}
}

func TestEnsureRefusesWritableByOthers(t *testing.T) {
	base := t.TempDir()
	for _, mode := range []os.FileMode{0o775, 0o757, 0o777} {
		d := filepath.Join(base, mode.String())
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		if err := Ensure(filepath.Join(d, "cache")); err == nil || !strings.Contains(err.Error(), "writable by group or others") {
			t.Errorf("mode %v on the way: %v, want a refusal", mode, err)
		}
		if err := Ensure(d); err == nil {
			t.Errorf("mode %v as the cache itself: accepted", mode)
		}
	}
	// Sticky and world-writable is a pass-through (as /tmp), never a cache.
	tmp := sharedTmp(t)
	if err := Ensure(tmp); err == nil {
		t.Errorf("a sticky world-writable directory accepted as the cache itself")
	}
}

func TestEnsureChecksSymlinks(t *testing.T) {
	needRoot(t)
	tmp := sharedTmp(t)
	// Another user's link to a directory of ours: the link is theirs to repoint.
	target := filepath.Join(t.TempDir(), "target")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(tmp, "k8sguide")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	if err := Ensure(filepath.Join(link, "cilium")); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("through another user's link: %v, want a refusal", err)
	}
	// Our own link into another user's directory: the target is checked too.
	theirs := filepath.Join(t.TempDir(), "theirs")
	if err := os.Mkdir(theirs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(theirs, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	ours := filepath.Join(tmp, "ours")
	if err := os.Symlink(theirs, ours); err != nil {
		t.Fatal(err)
	}
	if err := Ensure(filepath.Join(ours, "cilium")); err == nil {
		t.Errorf("our link into uid %d's directory accepted", nobody)
	}
	// Our own link to our own directory: fine.
	good := filepath.Join(tmp, "good")
	if err := os.Symlink(target, good); err != nil {
		t.Fatal(err)
	}
	if err := Ensure(filepath.Join(good, "cilium")); err != nil {
		t.Errorf("our link to our directory: %v", err)
	}
}

func TestCheckFile(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	f := filepath.Join(dir, "bpf_host.o")
	if err := os.WriteFile(f, []byte("obj"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckFile(f); err != nil {
		t.Fatalf("our own file: %v", err)
	}
	if err := os.Chown(f, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	if err := CheckFile(f); err == nil {
		t.Errorf("a file of uid %d accepted", nobody)
	}
	if err := os.Chown(f, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(f, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := CheckFile(f); err == nil {
		t.Errorf("a world-writable file accepted")
	}
}
