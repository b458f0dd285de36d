//go:build linux

// Command kind-engine starts and stops the private Docker engine the kind tests run on (internal/kindengine):
//
//	kind-engine start RUNCWRAP   start it (RUNCWRAP: the built runtime wrapper); prints DOCKER_HOST=... last
//	kind-engine stop             remove everything it made
//	kind-engine env              print DOCKER_HOST=... of the running engine
//	kind-engine exec -- CMD...   run CMD where the engine's networks are (its namespace), with its DOCKER_HOST
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/k8sguide/k8sguide/internal/kindengine"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "kind-engine:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (a network namespace, a Docker engine)")
	}
	if len(args) == 0 {
		return errors.New("usage: kind-engine start RUNCWRAP | stop | env | exec -- CMD...")
	}
	switch args[0] {
	case "start":
		if len(args) != 2 {
			return errors.New("usage: kind-engine start RUNCWRAP")
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		e, err := kindengine.Start(ctx, kindengine.DefaultName, args[1])
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "Docker engine %s (pid %d) runs in network namespace %s; its log: %s.\n"+
			"kind's nodes and the lab's client live in that namespace: run k8sguide there, for example\n"+
			"  bin/kind-engine exec -- bin/k8sguide up --provider kind --image IMAGE\n"+
			"Stop it, and remove everything it made, with make kind-engine-stop.\n",
			e.Name, e.PID, e.NetNS, e.LogFile())
		fmt.Printf("DOCKER_HOST=%s\n", e.Host)
	case "stop":
		e, err := kindengine.Load("")
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		return e.Stop()
	case "env":
		e, err := kindengine.Load("")
		if err != nil {
			return fmt.Errorf("no engine is running (make kind-engine): %w", err)
		}
		fmt.Printf("DOCKER_HOST=%s\n", e.Host)
	case "exec":
		argv := args[1:]
		if len(argv) > 0 && argv[0] == "--" {
			argv = argv[1:]
		}
		if len(argv) == 0 {
			return errors.New("usage: kind-engine exec -- CMD [ARG...]")
		}
		e, err := kindengine.Load("")
		if err != nil {
			return fmt.Errorf("no engine is running (make kind-engine): %w", err)
		}
		full := e.Command(argv...)
		path, err := exec.LookPath(full[0])
		if err != nil {
			return err
		}
		return syscall.Exec(path, full, append(os.Environ(), e.Env()...))
	default:
		return fmt.Errorf("unknown command %q: want start, stop, env or exec", args[0])
	}
	return nil
}
