package doctor

import (
	"os"
	"path/filepath"
	"testing"
)

// TestReadInotify reads a /proc tree made of files and symlinks as the kernel shows them: the limits, and the
// inotify descriptors of the user's processes (a descriptor's link reads "anon_inode:inotify"); another user's
// and other descriptors do not count.
func TestReadInotify(t *testing.T) {
	proc := t.TempDir()
	write := func(path, data string) {
		t.Helper()
		path = filepath.Join(proc, path)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(path, target string) {
		t.Helper()
		path = filepath.Join(proc, path)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, path); err != nil {
			t.Fatal(err)
		}
	}
	write("sys/fs/inotify/max_user_instances", "128\n")
	write("sys/fs/inotify/max_user_watches", "65536\n")
	write("100/status", "Name:\tk8sguide-lab\nUid:\t0\t0\t0\t0\n")
	link("100/fd/3", "anon_inode:inotify")
	link("100/fd/4", "anon_inode:inotify")
	link("100/fd/5", "socket:[1234]")
	write("200/status", "Name:\tkube-proxy\nUid:\t0\t0\t0\t0\n")
	link("200/fd/7", "anon_inode:inotify")
	write("300/status", "Name:\tother\nUid:\t1000\t1000\t1000\t1000\n")
	link("300/fd/3", "anon_inode:inotify")
	write("self/status", "Uid:\t0\n") // not a pid
	in, err := ReadInotify(proc, 0)
	if err != nil {
		t.Fatal(err)
	}
	if in != (Inotify{MaxInstances: 128, MaxWatches: 65536, Instances: 3}) {
		t.Errorf("ReadInotify: %+v, want 128, 65536 and 3 in use", in)
	}
	if _, err := ReadInotify(t.TempDir(), 0); err == nil {
		t.Error("a /proc without the limits read as fine")
	}
}

// TestRaiseInotify: --fix raises a lower limit and leaves a higher one alone.
func TestRaiseInotify(t *testing.T) {
	proc := t.TempDir()
	path := filepath.Join(proc, "sys/fs/inotify/max_user_instances")
	os.MkdirAll(filepath.Dir(path), 0o755)
	for _, tc := range []struct{ was, want string }{{"128\n", "512"}, {"8192\n", "8192\n"}} {
		os.WriteFile(path, []byte(tc.was), 0o644)
		if _, err := RaiseInotify(proc, RaiseInotifyTo); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(path); string(got) != tc.want {
			t.Errorf("limit %q raised to %q, want %q", tc.was, got, tc.want)
		}
	}
}
