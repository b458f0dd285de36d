package datapath

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// With HOME and XDG_CACHE_HOME unset the cache was /tmp/k8sguide/cilium-…, which any user can make first.
func TestCacheDirNeverSharedTmp(t *testing.T) {
	t.Setenv(CacheEnv, "")
	t.Setenv("HOME", "")
	t.Setenv("XDG_CACHE_HOME", "")
	os.Unsetenv("HOME")
	os.Unsetenv("XDG_CACHE_HOME")
	if d := CacheDir(); d != "" {
		t.Fatalf("CacheDir() without HOME = %q, want none (not a shared path)", d)
	}
	o := Options{Program: Host, NodeIP: netip.MustParseAddr("172.18.0.2")}
	if _, err := Compile(t.Context(), o, ""); !errors.Is(err, ErrNoCacheDir) {
		t.Fatalf("Compile without a cache directory: %v, want ErrNoCacheDir", err)
	}
}

// The campaign's case: nobody made the cache first and planted an object in it; Compile must refuse it before
// anything is loaded (or compiled).
func TestCompileRefusesPlantedCache(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the planted directory is given to nobody with chown")
	}
	tmp := filepath.Join(t.TempDir(), "tmp")
	if err := os.Mkdir(tmp, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	os.Chmod(tmp, 0o777|os.ModeSticky)
	planted := filepath.Join(tmp, "k8sguide", "cilium-"+CiliumVersion)
	if err := os.MkdirAll(planted, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Dir(planted), planted} {
		if err := os.Chown(d, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	o := Options{Program: Host, NodeIP: netip.MustParseAddr("172.18.0.2")}
	_, err := Compile(t.Context(), o, planted)
	if err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Fatalf("Compile into uid 65534's directory: %v, want a refusal", err)
	}
}
