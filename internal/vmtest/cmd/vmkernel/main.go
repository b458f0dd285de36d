//go:build linux

// Command vmkernel puts the test VM's kernel in the cache (downloading it with apt-get if needed) and prints
// where it is, so that CI or `make deps` can fetch it before the tests run: go run ./internal/vmtest/cmd/vmkernel
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/k8sguide/k8sguide/internal/vmtest"
)

func main() {
	k, err := vmtest.EnsureKernel(context.Background(), "", os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmkernel:", err)
		os.Exit(1)
	}
	fmt.Printf("%s %s (kernel %s)\nvmlinuz: %s\nmodules: %s\n", k.Package, k.PackageVersion, k.Version, k.Vmlinuz, k.ModulesDir)
}
