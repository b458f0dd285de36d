package kind

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/k8sguide/k8sguide/lab"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
)

// NodeToolPath is where k8sguide puts itself inside a kind node: the collector (`internal collect`), the kernel
// tracer and the connection helper run from there, next to the node's own iptables, nft and conntrack.
const NodeToolPath = "/opt/k8sguide/bin/k8sguide"

// NodeBinaryEnv names a Linux build of k8sguide for the nodes, when this host cannot give one (macOS, or nodes of
// another architecture).
const NodeBinaryEnv = "K8SGUIDE_NODE_BINARY"

// Tools puts a k8sguide that runs on a node into it, once per binary: a node that already has the same bytes
// (by SHA-256) is left alone.
type Tools struct {
	// Host is this binary; it is copied as is when the host is Linux on the nodes' architecture.
	Host string
	mu   sync.Mutex
	sums map[string]string // local file → sha256
	// ready are the nodes this process has checked or copied the binary into: a command reads a node several
	// times (a verify's snapshots before and after), and each check is two docker execs.
	ready map[string]bool
}

// NewTools returns Tools for the running binary.
func NewTools(host string) *Tools { return &Tools{Host: host, sums: map[string]string{}} }

// goArch maps `uname -m` to Go's GOARCH.
func goArch(machine string) (string, error) {
	switch strings.TrimSpace(machine) {
	case "x86_64", "amd64":
		return "amd64", nil
	case "aarch64", "arm64":
		return "arm64", nil
	}
	return "", fmt.Errorf("nodes of architecture %q are not supported", strings.TrimSpace(machine))
}

var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// binaryFor finds a Linux k8sguide for arch: $K8SGUIDE_NODE_BINARY, this binary when it is one, or
// k8sguide-linux-ARCH beside it (what `make cross` builds).
func (t *Tools) binaryFor(arch string) (string, error) {
	var candidates []string
	if env := os.Getenv(NodeBinaryEnv); env != "" {
		candidates = append(candidates, env)
	} else {
		if runtime.GOOS == "linux" && runtime.GOARCH == arch {
			candidates = append(candidates, t.Host)
		}
		candidates = append(candidates, filepath.Join(filepath.Dir(t.Host), "k8sguide-linux-"+arch))
	}
	for _, c := range candidates {
		f, err := elf.Open(c)
		if err != nil {
			continue
		}
		m := f.Machine
		f.Close()
		if m == elfMachine[arch] {
			return c, nil
		}
		if c == os.Getenv(NodeBinaryEnv) {
			return "", fmt.Errorf("%s=%s is a Linux binary for %v, but the nodes are linux/%s", NodeBinaryEnv, c, m, arch)
		}
	}
	return "", fmt.Errorf("the nodes run linux/%s and this k8sguide is %s/%s: build one for them with `make cross` (it writes k8sguide-linux-%s beside k8sguide) or set %s",
		arch, runtime.GOOS, runtime.GOARCH, arch, NodeBinaryEnv)
}

func (t *Tools) sum(path string) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.sums[path]; ok {
		return s, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	s := hex.EncodeToString(h.Sum(nil))
	t.sums[path] = s
	return s, nil
}

// Ensure makes NodeToolPath in node the right k8sguide and returns the path.
func (t *Tools) Ensure(ctx context.Context, node nodes.Node) (string, error) {
	t.mu.Lock()
	ready := t.ready[node.String()]
	t.mu.Unlock()
	if ready {
		return NodeToolPath, nil
	}
	path, err := t.ensure(ctx, node)
	if err == nil {
		t.mu.Lock()
		if t.ready == nil {
			t.ready = map[string]bool{}
		}
		t.ready[node.String()] = true
		t.mu.Unlock()
	}
	return path, err
}

func (t *Tools) ensure(ctx context.Context, node nodes.Node) (string, error) {
	// The binary for this host's architecture is the one the nodes run when they share it (the usual case, on
	// Linux and on Docker Desktop), and only a node of that architecture can hold it (binaryFor checks what is
	// copied): when the node's copy is it, one docker exec says so, without asking the node's architecture first.
	if bin, err := t.binaryFor(runtime.GOARCH); err == nil {
		if want, err := t.sum(bin); err == nil {
			if have, err := output(ctx, node, nil, "sha256sum", NodeToolPath); err == nil && strings.HasPrefix(have, want+" ") {
				return NodeToolPath, nil
			}
		}
	}
	out, err := output(ctx, node, nil, "uname", "-m")
	if err != nil {
		return "", fmt.Errorf("%s: uname -m: %w", node, err)
	}
	arch, err := goArch(out)
	if err != nil {
		return "", fmt.Errorf("%s: %w", node, err)
	}
	bin, err := t.binaryFor(arch)
	if err != nil {
		return "", err
	}
	want, err := t.sum(bin)
	if err != nil {
		return "", err
	}
	// sha256sum prints "SUM  PATH"; a missing file is an error, which means "copy it".
	if have, err := output(ctx, node, nil, "sha256sum", NodeToolPath); err == nil && strings.HasPrefix(have, want+" ") {
		return NodeToolPath, nil
	}
	f, err := os.Open(bin)
	if err != nil {
		return "", err
	}
	defer f.Close()
	tmp := NodeToolPath + ".tmp"
	steps := []struct {
		stdin io.Reader
		argv  []string
	}{
		{nil, []string{"mkdir", "-p", filepath.Dir(NodeToolPath)}},
		{f, []string{"tee", tmp}},
		{nil, []string{"chmod", "0755", tmp}},
		{nil, []string{"mv", "-f", tmp, NodeToolPath}},
	}
	for _, s := range steps {
		if _, err := output(ctx, node, s.stdin, s.argv[0], s.argv[1:]...); err != nil {
			return "", fmt.Errorf("copying k8sguide into %s (%s): %w", node, strings.Join(s.argv, " "), err)
		}
	}
	return NodeToolPath, nil
}

// output runs argv in the node and returns its standard output (tee's copy of the binary is thrown away).
func output(ctx context.Context, node nodes.Node, stdin io.Reader, name string, args ...string) (string, error) {
	var stdout bytes.Buffer
	var stderr bytes.Buffer
	cmd := node.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.SetStdin(stdin)
	}
	if name == "tee" {
		cmd.SetStdout(io.Discard)
	} else {
		cmd.SetStdout(&stdout)
	}
	cmd.SetStderr(&stderr)
	if err := cmd.Run(); err != nil {
		if msg := lab.FirstLine(stderr.String()); msg != "" {
			return "", fmt.Errorf("%s", msg)
		}
		return "", err
	}
	return stdout.String(), nil
}
