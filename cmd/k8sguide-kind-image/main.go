//go:build linux

// Command k8sguide-kind-image builds k8sguide's offline kind node image (lab/kind/nodeimage) and loads it into the
// Docker engine DOCKER_HOST names; `make kind-image` runs it. Progress goes to standard error; the last line of
// standard output is the image's name, for scripts: --image $(make -s kind-image | tail -1). With --cilium it builds
// Cilium's agent and operator images from Cilium's source instead (`make cilium-images`), one name per line.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"

	kindcmd "sigs.k8s.io/kind/pkg/cmd"

	"github.com/k8sguide/k8sguide/lab/kind/nodeimage"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "k8sguide-kind-image:", err)
		os.Exit(1)
	}
}

func run() error {
	var o nodeimage.Options
	flag.StringVar(&o.CacheDir, "cache", "", "where the expensive parts are kept (default ~/.cache/k8sguide/kind-image)")
	flag.StringVar(&o.Mirror, "mirror", "", "the Debian mirror debootstrap uses (default: this machine's apt source)")
	flag.BoolVar(&o.Rebuild, "rebuild", false, "build even when the engine holds the image with the same key")
	cilium := flag.Bool("cilium", false, "build Cilium's agent and operator images (the ebpf dataplane on kind) instead of the node image")
	root := flag.String("module", "", "the k8sguide checkout (default: the module of the working directory)")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	o.ModuleRoot = *root
	if o.ModuleRoot == "" {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/k8sguide/k8sguide").Output()
		if err != nil {
			return errors.New("run it in the k8sguide checkout, or give --module")
		}
		o.ModuleRoot = strings.TrimSpace(string(out))
	}
	o.Progress = os.Stderr
	o.Logger = kindcmd.NewLogger()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *cilium {
		names, err := nodeimage.BuildCilium(ctx, o)
		if err != nil {
			return err
		}
		fmt.Println(strings.Join(names, "\n"))
		return nil
	}
	name, err := nodeimage.Build(ctx, o)
	if err != nil {
		return err
	}
	fmt.Println(name)
	return nil
}
