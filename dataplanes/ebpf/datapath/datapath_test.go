package datapath

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeClang puts an executable named name on a PATH of its own that prints version as clang --version does.
func fakeClang(t *testing.T, name, version string) {
	t.Helper()
	dir := t.TempDir()
	script := "#!/bin/sh\necho '" + version + "'\necho 'Target: x86_64-pc-linux-gnu'\n"
	if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
}

func TestFindClangRefusesOldClang(t *testing.T) {
	fakeClang(t, "clang", "Debian clang version 14.0.6")
	_, err := FindClang()
	if err == nil {
		t.Fatal("clang 14 accepted")
	}
	msg := err.Error()
	for _, want := range []string{">= 18.1", "clang-19 package", "clang is 14.0.6"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error is not one line: %q", msg)
	}
}

func TestFindClangWithoutAny(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if _, err := FindClang(); err == nil || !strings.Contains(err.Error(), "install the clang-19 package") {
		t.Fatalf("no clang at all: %v", err)
	}
}

func TestFindClangTakesVersioned(t *testing.T) {
	fakeClang(t, "clang-19", "Debian clang version 19.1.7 (3+b1)")
	c, err := FindClang()
	if err != nil || c.Version != "19.1.7" || filepath.Base(c.Path) != "clang-19" {
		t.Fatalf("FindClang = %+v, %v", c, err)
	}
}

func TestDefinesCarryTheNodeIP(t *testing.T) {
	// 172.18.0.2 as the little-endian u32 of its network-order bytes, as Cilium's node_config.h writes it.
	got := strings.Join(Defines(Options{NodeIP: mustAddr("172.18.0.2")}), " ")
	if !strings.Contains(got, "-DIPV4_DIRECT_ROUTING=0x20012ac") {
		t.Errorf("defines %q", got)
	}
}

func TestSourcesOverride(t *testing.T) {
	t.Setenv(SourcesEnv, t.TempDir())
	if _, err := Sources(); err == nil || !strings.Contains(err.Error(), "holds no bpf/bpf_host.c") {
		t.Fatalf("empty override: %v", err)
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
