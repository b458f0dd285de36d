package render

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/k8sguide/k8sguide/internal/privdir"
)

// GraphvizName is the program that lays pictures out (cmd/k8sguide-graphviz); GraphvizEnv overrides where it is.
const (
	GraphvizName = "k8sguide-graphviz"
	GraphvizEnv  = "K8SGUIDE_GRAPHVIZ"
)

// graphvizPath finds k8sguide-graphviz: $K8SGUIDE_GRAPHVIZ, beside the running k8sguide, or on PATH.
func graphvizPath() (string, error) {
	if p := os.Getenv(GraphvizEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", GraphvizEnv, p, err)
		}
		return p, nil
	}
	if exe, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(exe), GraphvizName)
		if _, err := os.Stat(beside); err == nil {
			return beside, nil
		}
	}
	if p, err := exec.LookPath(GraphvizName); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("pictures are laid out by %s, which is not beside k8sguide nor on PATH: `make build` builds it (or set %s; -o dot prints the graph for your own Graphviz)", GraphvizName, GraphvizEnv)
}

// GraphvizCacheEnv overrides where k8sguide-graphviz keeps its cache (the tests keep it in their directory).
const GraphvizCacheEnv = "K8SGUIDE_GRAPHVIZ_CACHE"

// graphvizCache is where k8sguide-graphviz keeps Graphviz's compiled WebAssembly (0.7 s to compile, 12 MB):
// $K8SGUIDE_GRAPHVIZ_CACHE, else $XDG_CACHE_HOME/k8sguide/graphviz (~/.cache/...). The cache holds machine code
// the program runs, so it must be private (privdir); a directory that is not is refused. Without HOME it is a
// private directory made for this run and removed by done: never go-graphviz's own /tmp/go-graphviz, which
// another user could make first.
func graphvizCache() (dir string, done func(), err error) {
	dir = os.Getenv(GraphvizCacheEnv)
	if dir == "" {
		if base, err := os.UserCacheDir(); err == nil {
			dir = filepath.Join(base, "k8sguide", "graphviz")
		}
	}
	if dir == "" {
		tmp, err := os.MkdirTemp("", "k8sguide-graphviz-")
		if err != nil {
			return "", nil, err
		}
		return tmp, func() { os.RemoveAll(tmp) }, nil
	}
	if err := privdir.Ensure(dir); err != nil {
		return "", nil, err
	}
	return dir, func() {}, nil
}

// Layout turns a DOT graph into SVG with k8sguide-graphviz.
func Layout(ctx context.Context, dot string) ([]byte, error) {
	path, err := graphvizPath()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, path)
	cmd.Stdin = strings.NewReader(dot)
	// go-graphviz caches its compiled module in $TMPDIR/go-graphviz: keep it with k8sguide's other caches
	// rather than in the shared /tmp.
	cache, done, err := graphvizCache()
	if err != nil {
		return nil, err
	}
	defer done()
	cmd.Env = append(os.Environ(), "TMPDIR="+cache)
	var out, errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(errs.String()); msg != "" {
			return nil, fmt.Errorf("%s", msg)
		}
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return out.Bytes(), nil
}
