// Package graphviz lays out a Graphviz (DOT) graph as SVG with Graphviz itself, compiled to WebAssembly and run
// by a pure-Go runtime (github.com/goccy/go-graphviz: Graphviz 12.1.2 on wazero). No cgo and no `dot` on the
// machine: the same layout, byte for byte, on Linux and macOS.
//
// Only k8sguide-graphviz imports this package: go-graphviz compiles its WebAssembly module when the program
// starts (0.6–0.8 s), a price every k8sguide command would pay if k8sguide linked it.
package graphviz

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	"github.com/goccy/go-graphviz"
)

// One Graphviz instance, used by one layout at a time: the WebAssembly module's memory is not safe for
// concurrent use (two renders at once corrupt each other's output).
var (
	mu       sync.Mutex
	instance *graphviz.Graphviz
)

// SVG lays out the DOT graph and returns it as SVG.
func SVG(ctx context.Context, dot []byte) ([]byte, error) {
	mu.Lock()
	defer mu.Unlock()
	if instance == nil {
		g, err := graphviz.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("starting Graphviz: %v", err)
		}
		g.SetLayout(graphviz.DOT)
		instance = g
	}
	graph, err := graphviz.ParseBytes(dot)
	if err != nil {
		return nil, fmt.Errorf("reading the graph: %v", err)
	}
	defer graph.Close()
	var buf bytes.Buffer
	if err := instance.Render(ctx, graph, graphviz.SVG, &buf); err != nil {
		return nil, fmt.Errorf("laying out the graph: %v", err)
	}
	return buf.Bytes(), nil
}
