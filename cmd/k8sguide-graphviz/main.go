// Command k8sguide-graphviz lays out a Graphviz (DOT) graph read from stdin and writes it as SVG on stdout.
// `k8sguide trace -o svg|html` runs it: the picture's layout is Graphviz's, in a program of its own so that
// k8sguide does not start Graphviz's WebAssembly runtime on every command (see inspect/render/graphviz).
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/k8sguide/k8sguide/inspect/render/graphviz"
)

func main() {
	if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, "usage: k8sguide-graphviz < graph.dot > graph.svg")
		os.Exit(2)
	}
	dot, err := io.ReadAll(os.Stdin)
	if err == nil {
		var svg []byte
		if svg, err = graphviz.SVG(context.Background(), dot); err == nil {
			_, err = os.Stdout.Write(svg)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "k8sguide-graphviz:", err)
		os.Exit(1)
	}
}
