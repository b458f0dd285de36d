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

// TestCompilePrograms builds bpf_host, bpf_lxc and bpf_sock for a node from the pinned sources with the generated
// headers: the router address must land in IPV4_GATEWAY (Cilium's sample defines it without a guard, so only a
// node_config.h of the build's own can set it), and a second build must come from the cache.
func TestCompilePrograms(t *testing.T) {
	if _, err := FindClang(); err != nil {
		t.Skipf("no clang to build Cilium's datapath with: %v", err)
	}
	src, err := Sources()
	if err != nil {
		t.Skipf("no Cilium sources: %v", err)
	}
	h, err := nodeConfig(src, Options{NodeIP: mustAddr("172.18.0.3"), RouterIP: mustAddr("10.244.1.1")})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(h), "#define IPV4_GATEWAY 0x101f40a\n") || strings.Contains(string(h), sampleGateway) {
		t.Errorf("node_config.h does not carry 10.244.1.1 as IPV4_GATEWAY")
	}
	cache := t.TempDir()
	for _, p := range []Program{Host, LXC, Sock} {
		o := Options{Program: p, NodeIP: mustAddr("172.18.0.3"), RouterIP: mustAddr("10.244.1.1"), HostNetnsCookie: 4096}
		obj, err := Compile(t.Context(), o, cache)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if !strings.HasPrefix(filepath.Base(obj), string(p)+"-") {
			t.Errorf("%s built as %s", p, obj)
		}
		again, err := Compile(t.Context(), o, cache)
		if err != nil || again != obj {
			t.Errorf("%s: second build %s, %v; want the cached %s", p, again, err, obj)
		}
	}
	left, _ := filepath.Glob(filepath.Join(cache, "*include*"))
	if len(left) > 0 {
		t.Errorf("include directories left behind: %v", left)
	}
}

func TestSourcesOverride(t *testing.T) {
	t.Setenv(SourcesEnv, t.TempDir())
	if _, err := Sources(); err == nil || !strings.Contains(err.Error(), "holds no bpf/bpf_host.c") {
		t.Fatalf("empty override: %v", err)
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
