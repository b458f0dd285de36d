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
	"runtime"
	"strconv"
	"strings"

	"github.com/k8sguide/k8sguide/internal/privdir"
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

// Program is one of Cilium's datapath programs the lab builds.
type Program string

const (
	// Host is bpf_host.c: cil_from_netdev/cil_to_netdev on the node's devices, cil_from_host/cil_to_host on
	// cilium_host and cilium_net.
	Host Program = "bpf_host"
	// LXC is bpf_lxc.c: cil_from_container on each pod's host-side veth, cil_lxc_policy reached by tail call.
	LXC Program = "bpf_lxc"
	// Sock is bpf_sock.c: the socket LB, cil_sock4_connect and its siblings on the node's cgroup.
	Sock Program = "bpf_sock"
)

// Options are what a node's build of a program depends on.
type Options struct {
	// Program is what to build; "" is Host.
	Program Program
	// NodeIP is the node's address on its external interface: IPV4_DIRECT_ROUTING, the source of NodePort SNAT
	// and the address FIB lookups answer from. It is a compile-time constant in Cilium's node_config.h.
	NodeIP netip.Addr
	// RouterIP is cilium_host's address (the pods' gateway): IPV4_GATEWAY in node_config.h. Unset, the sample
	// header's value stays (a bpf_host that serves no pods never uses it).
	RouterIP netip.Addr
	// HostNetnsCookie is the node's network namespace cookie: HOST_NETNS_COOKIE, which bpf_sock compares a
	// socket's namespace with to tell the node's own sockets from its pods'. Sock only (the agent writes it for
	// every program; only bpf_sock reads it, and leaving it out of the others keeps them cacheable across labs).
	HostNetnsCookie uint64
}

func (o Options) program() Program {
	if o.Program == "" {
		return Host
	}
	return o.Program
}

// le32 is how Cilium writes an IPv4 address into node_config.h: the little-endian u32 its network-order bytes
// read as (addresses are __be32 in the datapath).
func le32(a netip.Addr) uint32 {
	ip := a.As4()
	return uint32(ip[0]) | uint32(ip[1])<<8 | uint32(ip[2])<<16 | uint32(ip[3])<<24
}

// Defines are the -D flags of the node's kube-proxy-replacement datapath on an IPv4 node: what the agent's
// generated node_config.h enables (pkg/datapath/linux/config). The remaining settings (LB algorithm, hash
// seed, interface index and MAC, endpoint id and identity, NodePort range) are load-time constants the loader
// sets.
func Defines(o Options) []string {
	return []string{
		"-DENABLE_IPV4=1",
		"-DENABLE_NODEPORT=1",
		fmt.Sprintf("-DIPV4_DIRECT_ROUTING=%#x", le32(o.NodeIP)),
		// Not SERVICE_NO_BACKEND_RESPONSE (the agent's default --service-no-backend-response=reject): built
		// with it, bpf_host does send the ICMP port unreachable for a Service without backends (seen on the
		// client's veth), but the client's IP layer discards it (IpInDiscards), so the connection hangs as on
		// a drop. The SYN left the client with its checksum still to do (tx checksumming is on for a veth's
		// and a bridge's local sockets, and a veth passes the packet on as it is), and the ICMP reply, made
		// from it in place, reaches the client's IP layer in that state: with `ethtool -K br0 tx off` in the
		// client's namespace the same reply is accepted and connect() is refused at once (measured). A client
		// on another machine sends with the checksum done, so a real NIC never shows this; a client on kind's
		// Docker host loses real Cilium's reply the same way (measured; trace --verify now sees the reply
		// arrive, lab/nodecmd's watchUnreachable). Without the define the datapath drops, which is what a
		// client here sees either way, and what the trace then says.
		// (Cilium 1.18 also needed -DENABLE_SERVICE_PROTOCOL_DIFFERENTIATION; in 1.20 service keys always
		// carry the protocol and the define is gone. ENABLE_HOST_ROUTING and ENABLE_SESSION_AFFINITY are gone
		// too: enable_bpf_host_routing is a load-time constant and affinity is always compiled in.)
		// The socket LB for the node's own sockets only (socketLB.hostNamespaceOnly: bpf_sock skips a socket
		// in another namespace than HOST_NETNS_COOKIE), so bpf_lxc balances the pods' ClusterIP traffic per
		// packet (ENABLE_PER_PACKET_LB): the pods' processes include connections k8sguide opens in a pod's
		// namespace from outside the node's cgroup, which bpf_sock would never see.
		"-DENABLE_SOCKET_LB_HOST_ONLY=1",
	}
}

// sampleGateway is the IPV4_GATEWAY line of Cilium's sample node_config.h, which the generated one replaces.
const sampleGateway = "#define IPV4_GATEWAY 0xfffff50a"

// nodeConfig is the node_config.h the build includes ahead of the sample: the sample with the node's router
// address as IPV4_GATEWAY (the sample defines it unconditionally, so a -D would be a redefinition).
func nodeConfig(src string, o Options) ([]byte, error) {
	sample, err := os.ReadFile(filepath.Join(src, "bpf", "node_config.h"))
	if err != nil {
		return nil, err
	}
	if !o.RouterIP.IsValid() {
		return sample, nil
	}
	if !bytes.Contains(sample, []byte(sampleGateway)) {
		return nil, fmt.Errorf("the bpf/node_config.h of Cilium %s has no line %q to set the router address in", CiliumVersion, sampleGateway)
	}
	return bytes.Replace(sample, []byte(sampleGateway), fmt.Appendf(nil, "#define IPV4_GATEWAY %#x", le32(o.RouterIP)), 1), nil
}

// epConfig is the ep_config.h the agent writes for a program's template (HeaderfileWriter.writeTemplateConfig
// with the default endpoint options: drop and trace notifications on, debug off).
func epConfig(p Program) []byte {
	var b bytes.Buffer
	b.WriteString("#include \"lib/utils.h\"\n")
	switch p {
	case LXC:
		// Without per-endpoint routes (the default) an endpoint routes in its program.
		b.WriteString("#define ENABLE_ROUTING 1\n")
	case Host:
		b.WriteString("#define HOST_ENDPOINT 1\n")
	}
	b.WriteString("#define LOCAL_DELIVERY_METRICS 1\n#define DROP_NOTIFY 1\n#define TRACE_NOTIFY 1\n#define POLICY_VERDICT_NOTIFY 1\n")
	return b.Bytes()
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

// Plan is one program's compilation, worked out without running it: clang, its arguments, the generated
// headers, and the object's name, a hash of all of them. `up` plans every node's objects first, to tell the user
// before a compilation that takes minutes, then compiles the same plans.
type Plan struct {
	prog       Program
	clang      Clang
	src        string
	args       []string
	nodeH, epH []byte
	name       string
}

// NewPlan works out o's compilation with clang (FindClang's).
func NewPlan(o Options, clang Clang) (*Plan, error) {
	if !o.NodeIP.Is4() {
		return nil, fmt.Errorf("datapath: node IP %v is not IPv4", o.NodeIP)
	}
	if o.RouterIP.IsValid() && !o.RouterIP.Is4() {
		return nil, fmt.Errorf("datapath: router IP %v is not IPv4", o.RouterIP)
	}
	c := &Plan{prog: o.program(), clang: clang}
	if c.prog != Host && c.prog != LXC && c.prog != Sock {
		return nil, fmt.Errorf("datapath: no program %q", c.prog)
	}
	var err error
	if c.src, err = Sources(); err != nil {
		return nil, err
	}
	if c.nodeH, err = nodeConfig(c.src, o); err != nil {
		return nil, err
	}
	c.epH = epConfig(c.prog)
	c.args = append([]string{}, cflags...)
	c.args = append(c.args, Defines(o)...)
	if c.prog == Sock {
		if o.HostNetnsCookie == 0 {
			return nil, errors.New("datapath: bpf_sock needs the node's network namespace cookie")
		}
		c.args = append(c.args, fmt.Sprintf("-DHOST_NETNS_COOKIE=%d", o.HostNetnsCookie))
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n%s\n%s\n", c.clang.Path, c.clang.Version, c.src, CiliumVersion, c.prog)
	for _, a := range c.args {
		fmt.Fprintln(h, a)
	}
	h.Write(c.nodeH)
	h.Write(c.epH)
	c.name = string(c.prog) + "-" + hex.EncodeToString(h.Sum(nil))[:16]
	return c, nil
}

// Program is the program c builds.
func (c *Plan) Program() Program { return c.prog }

// Cached says whether Compile would find c's object in cacheDir built already (no clang run).
func (c *Plan) Cached(cacheDir string) bool {
	if cacheDir == "" {
		return false
	}
	_, err := os.Lstat(filepath.Join(cacheDir, c.name+".o"))
	return err == nil
}

// Compile builds a program for a node into cacheDir and returns its path. An object built with the same clang,
// sources, headers and flags is reused: its name is a hash of them.
func Compile(ctx context.Context, o Options, cacheDir string) (string, error) {
	if cacheDir == "" {
		return "", ErrNoCacheDir
	}
	clang, err := FindClang()
	if err != nil {
		return "", err
	}
	c, err := NewPlan(o, clang)
	if err != nil {
		return "", err
	}
	return c.Compile(ctx, cacheDir)
}

// Compile builds c's object into cacheDir, or finds it there, and returns its path.
func (c *Plan) Compile(ctx context.Context, cacheDir string) (string, error) {
	// Root loads what is in cacheDir into the kernel: it must be no one else's to write.
	if cacheDir == "" {
		return "", ErrNoCacheDir
	}
	if err := privdir.Ensure(cacheDir); err != nil {
		return "", err
	}
	prog, clang, src, args, nodeH, epH, name := c.prog, c.clang, c.src, c.args, c.nodeH, c.epH, c.name
	out := filepath.Join(cacheDir, name+".o")
	if _, err := os.Lstat(out); err == nil {
		if err := privdir.CheckFile(out); err != nil {
			return "", err
		}
		return out, nil
	}
	// The generated headers go in a directory searched before bpf/ (whose samples they replace), as the
	// agent's -I of its state directory does.
	inc, err := os.MkdirTemp(cacheDir, name+"-include-*")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(inc)
	for file, data := range map[string][]byte{"node_config.h": nodeH, "ep_config.h": epH} {
		if err := os.WriteFile(filepath.Join(inc, file), data, 0o644); err != nil {
			return "", err
		}
	}
	tmp, err := os.CreateTemp(cacheDir, name+"-*.o.tmp")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	args = append(args, "-I"+inc, "-I"+filepath.Join(src, "bpf"), "-I"+filepath.Join(src, "bpf", "include"))
	args = append(args, "-c", filepath.Join(src, "bpf", string(prog)+".c"), "-o", tmp.Name())
	cmd := exec.CommandContext(ctx, clang.Path, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := runDying(cmd); err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", fmt.Errorf("compiling Cilium %s %s.c with %s: %v: %s", CiliumVersion, prog, clang.Path, err, lastLines(stderr.String(), 5))
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", err
	}
	return out, nil
}

// runDying runs cmd so that it dies with this process: an `up` killed while compiling left clang running. The
// kernel kills it when the thread that started it ends (Pdeathsig, on Linux), so that thread is held for the
// goroutine until clang has exited (a Go thread can otherwise end under a running child, killing it early); and
// it runs in a process group of its own, killed whole when ctx is cancelled (whatever clang started, too).
func runDying(cmd *exec.Cmd) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	dieWithParent(cmd)
	return cmd.Run()
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
// $XDG_CACHE_HOME/k8sguide/cilium-<version> (~/.cache/...); "" when neither that nor HOME is set. Never a path
// in the shared temporary directory: another user could make it first and plant the objects root loads
// (Compile refuses "" and any directory privdir does not accept).
func CacheDir() string {
	if d := os.Getenv(CacheEnv); d != "" {
		return d
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(base, "k8sguide", "cilium-"+CiliumVersion)
}

// ErrNoCacheDir is Compile's refusal of an empty cache directory.
var ErrNoCacheDir = errors.New("no directory to keep Cilium's compiled objects in: HOME and XDG_CACHE_HOME are unset; set one of them or " + CacheEnv + " (a shared /tmp path is not used: another user could plant the objects there)")

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
