package vmtest

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The cached kernels are booted and their modules loaded: a cache of another user's is refused before anything
// in it is read.
func TestEnsureKernelRefusesAnotherUsersCache(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the planted cache is given to nobody with chown")
	}
	planted := filepath.Join(t.TempDir(), "vm")
	if err := os.Mkdir(planted, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(planted, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureKernel(t.Context(), planted, io.Discard); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Fatalf("EnsureKernel with uid 65534's cache: %v, want a refusal", err)
	}
}
