package render

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Graphviz's cache holds machine code k8sguide-graphviz runs: never a shared path, never another user's.
func TestGraphvizCachePrivate(t *testing.T) {
	t.Setenv(GraphvizCacheEnv, "")
	t.Setenv("HOME", "")
	t.Setenv("XDG_CACHE_HOME", "")
	os.Unsetenv("HOME")
	os.Unsetenv("XDG_CACHE_HOME")
	dir, done, err := graphvizCache()
	if err != nil {
		t.Fatalf("without HOME: %v, want a private directory for the run", err)
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("without HOME the cache is %s (%v, %v), want a fresh 0700 directory", dir, fi, err)
	}
	if filepath.Dir(dir) == filepath.Clean(os.TempDir()) && filepath.Base(dir) == "k8sguide" {
		t.Errorf("a predictable shared path: %s", dir)
	}
	done()
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("the run's private cache %s was left behind", dir)
	}

	if os.Geteuid() != 0 {
		t.Skip("needs root for the rest: the planted directory is given to nobody with chown")
	}
	planted := filepath.Join(t.TempDir(), "graphviz")
	if err := os.Mkdir(planted, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(planted, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	t.Setenv(GraphvizCacheEnv, planted)
	if _, _, err := graphvizCache(); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("a cache of uid 65534: %v, want a refusal", err)
	}
}
