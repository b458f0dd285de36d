// Package datapath builds Cilium's real host datapath (bpf_host.c, from the pinned Cilium release's sources) for a
// lab node. It only runs clang: loading the object and programming its maps is the nested module's job
// (dataplanes/ebpf/cilium), which may import Cilium's Go packages; this package must not.
package datapath

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// CiliumVersion is the Cilium release whose datapath the lab runs; dataplanes/ebpf/cilium/go.mod requires the
// same version, so `go mod download` there puts these sources in the module cache.
const CiliumVersion = "v1.20.2"

// SourcesEnv overrides where the Cilium source tree is (a directory holding bpf/bpf_host.c).
const SourcesEnv = "K8SGUIDE_CILIUM_SRC"

// Sources returns the root of the Cilium source tree the datapath is compiled from: $K8SGUIDE_CILIUM_SRC, or
// the Go module cache's copy of github.com/cilium/cilium@CiliumVersion.
func Sources() (string, error) {
	if dir := os.Getenv(SourcesEnv); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "bpf", "bpf_host.c")); err != nil {
			return "", fmt.Errorf("%s=%s holds no bpf/bpf_host.c", SourcesEnv, dir)
		}
		return dir, nil
	}
	cache := moduleCache()
	dir := filepath.Join(cache, "github.com", "cilium", "cilium@"+CiliumVersion)
	if _, err := os.Stat(filepath.Join(dir, "bpf", "bpf_host.c")); err != nil {
		return "", fmt.Errorf("the datapath sources of Cilium %s are not in the Go module cache (%s): run `make build` (building k8sguide-cilium downloads them), or set %s to a Cilium %s source tree", CiliumVersion, dir, SourcesEnv, CiliumVersion)
	}
	return dir, nil
}

// moduleCache is `go env GOMODCACHE` without needing the go command: $GOMODCACHE, else the first entry of
// $GOPATH, else ~/go, plus /pkg/mod. Under sudo HOME may be root's while the user's cache is elsewhere; the
// environment variables cover that.
func moduleCache() string {
	if c := os.Getenv("GOMODCACHE"); c != "" {
		return c
	}
	if gp := os.Getenv("GOPATH"); gp != "" {
		return filepath.Join(filepath.SplitList(gp)[0], "pkg", "mod")
	}
	if out, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil {
		if c := strings.TrimSpace(string(out)); c != "" {
			return c
		}
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, "go", "pkg", "mod")
}

// MinClang is the oldest clang Cilium 1.17 and later build with.
var MinClang = [2]int{18, 1}

// clangNames are tried in order: Debian installs versioned binaries (clang-19) and its plain `clang` is 14.
var clangNames = []string{"clang-21", "clang-20", "clang-19", "clang-18", "clang"}

var clangVersion = regexp.MustCompile(`clang version (\d+)\.(\d+)`)

// Clang is a clang that can build the datapath.
type Clang struct {
	Path    string
	Version string // "19.1.7"
}

// FindClang finds a clang >= 18.1 and says which package to install when there is none.
func FindClang() (Clang, error) {
	var seen []string
	for _, name := range clangNames {
		path, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		out, err := exec.Command(path, "--version").Output()
		if err != nil {
			continue
		}
		m := clangVersion.FindStringSubmatch(string(out))
		if m == nil {
			continue
		}
		major, _ := strconv.Atoi(m[1])
		minor, _ := strconv.Atoi(m[2])
		full := strings.Fields(string(out)[strings.Index(string(out), "version ")+len("version "):])[0]
		if major > MinClang[0] || major == MinClang[0] && minor >= MinClang[1] {
			return Clang{Path: path, Version: full}, nil
		}
		seen = append(seen, fmt.Sprintf("%s is %s", name, full))
	}
	found := ""
	if len(seen) > 0 {
		found = " (" + strings.Join(seen, ", ") + ")"
	}
	return Clang{}, fmt.Errorf("the ebpf dataplane compiles Cilium %s's datapath, which needs clang >= %d.%d, and none was found%s: install the clang-19 package (apt-get install clang-19)", CiliumVersion, MinClang[0], MinClang[1], found)
}

// Options are what a node's build of bpf_host depends on.
type Options struct {
	// NodeIP is the node's address on its external interface: IPV4_DIRECT_ROUTING, the source of NodePort SNAT
	// and the address FIB lookups answer from. It is a compile-time constant in Cilium's node_config.h.
	NodeIP netip.Addr
}

// Defines are the -D flags on top of Cilium's sample node_config.h/netdev_config.h: the features of a
// kube-proxy-replacement NodePort datapath on an IPv4 node. The agent writes these into the node_config.h it
// generates; the remaining settings (LB algorithm, hash seed, interface index and MAC, NodePort range) are
// load-time constants the loader sets.
func Defines(o Options) []string {
	ip := o.NodeIP.As4()
	// Cilium stores IPv4 addresses as __be32 and writes the define as the little-endian u32 those bytes read as.
	le := uint32(ip[0]) | uint32(ip[1])<<8 | uint32(ip[2])<<16 | uint32(ip[3])<<24
	return []string{
		"-DENABLE_IPV4=1",
		"-DENABLE_NODEPORT=1",
		"-DENABLE_SESSION_AFFINITY=1",
		"-DENABLE_HOST_ROUTING=1",
		fmt.Sprintf("-DIPV4_DIRECT_ROUTING=%#x", le),
		// (Cilium 1.18 also needed -DENABLE_SERVICE_PROTOCOL_DIFFERENTIATION; in 1.20 service keys always
		// carry the protocol and the define is gone.)
	}
}

// cflags are Cilium's StandardCFlags (pkg/datapath/loader/compile.go) with -g for BTF, which the loader needs.
var cflags = []string{"-O2", "-g", "--target=bpf", "-std=gnu99", "-nostdinc", "-mcpu=v3",
	"-ftrap-function=__undefined_trap",
	"-Wall", "-Wextra", "-Werror", "-Wshadow",
	"-Wno-address-of-packed-member",
	"-Wno-unknown-warning-option",
	"-Wno-gnu-variable-sized-type-not-at-end",
	"-Wimplicit-int-conversion",
	"-Wenum-conversion",
	"-Wimplicit-fallthrough"}

// Compile builds bpf_host.o for a node into cacheDir and returns its path. An object built with the same clang,
// sources and flags is reused: its name is a hash of them.
func Compile(ctx context.Context, o Options, cacheDir string) (string, error) {
	if !o.NodeIP.Is4() {
		return "", fmt.Errorf("datapath: node IP %v is not IPv4", o.NodeIP)
	}
	clang, err := FindClang()
	if err != nil {
		return "", err
	}
	src, err := Sources()
	if err != nil {
		return "", err
	}
	args := append([]string{}, cflags...)
	args = append(args, "-I"+filepath.Join(src, "bpf"), "-I"+filepath.Join(src, "bpf", "include"))
	args = append(args, Defines(o)...)
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n%s\n", clang.Path, clang.Version, src, CiliumVersion)
	for _, a := range args {
		fmt.Fprintln(h, a)
	}
	out := filepath.Join(cacheDir, "bpf_host-"+hex.EncodeToString(h.Sum(nil))[:16]+".o")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(cacheDir, "bpf_host-*.o.tmp")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	args = append(args, "-c", filepath.Join(src, "bpf", "bpf_host.c"), "-o", tmp.Name())
	cmd := exec.CommandContext(ctx, clang.Path, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", fmt.Errorf("compiling Cilium %s bpf_host.c with %s: %v: %s", CiliumVersion, clang.Path, err, lastLines(stderr.String(), 5))
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", err
	}
	return out, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// CacheEnv overrides the directory compiled objects are kept in.
const CacheEnv = "K8SGUIDE_CACHE_DIR"

// CacheDir is where compiled objects are kept between labs: $K8SGUIDE_CACHE_DIR, else
// $XDG_CACHE_HOME/k8sguide/cilium-<version> (~/.cache/...).
func CacheDir() string {
	if d := os.Getenv(CacheEnv); d != "" {
		return d
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	return filepath.Join(base, "k8sguide", "cilium-"+CiliumVersion)
}

// KernelHasBPFFS tells whether the running kernel offers a bpf filesystem ("bpf" in /proc/filesystems); the
// error says /proc/filesystems could not be read, and then nothing is known.
func KernelHasBPFFS() (bool, error) {
	data, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return false, fmt.Errorf("reading /proc/filesystems: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[len(f)-1] == "bpf" {
			return true, nil
		}
	}
	return false, nil
}

// ErrNoBPFFS says the kernel cannot give the lab a bpf filesystem.
var ErrNoBPFFS = errors.New("the kernel has no bpf filesystem (bpffs), which the ebpf dataplane pins its maps and links in: use a kernel with CONFIG_BPF_SYSCALL, or another --dataplane")
