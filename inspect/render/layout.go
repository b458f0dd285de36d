package render

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// GraphvizName is the program that lays pictures out (cmd/k8sguide-graphviz); GraphvizEnv overrides where it is.
const (
	GraphvizName = "k8sguide-graphviz"
	GraphvizEnv  = "K8SGUIDE_GRAPHVIZ"
)

// Layout turns a DOT graph into SVG. It runs k8sguide-graphviz; tests that link Graphviz replace it.
var Layout func(ctx context.Context, dot string) ([]byte, error) = runGraphviz

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

func runGraphviz(ctx context.Context, dot string) ([]byte, error) {
	path, err := graphvizPath()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, path)
	cmd.Stdin = strings.NewReader(dot)
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
