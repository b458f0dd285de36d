// Package app assembles k8sguide's cobra commands. Each command lives in its own package with a flags struct,
// NewCommand and runE, as kind's do; the work is done by lab, dataplanes and inspect.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/k8sguide/k8sguide/cmd/k8sguide/app/scenario"

	"github.com/k8sguide/k8sguide/cmd/k8sguide/app/compare"
	"github.com/k8sguide/k8sguide/cmd/k8sguide/app/connect"

	"github.com/spf13/cobra"

	"github.com/k8sguide/k8sguide/cmd/k8sguide/app/deploy"
	"github.com/k8sguide/k8sguide/cmd/k8sguide/app/down"
	execcmd "github.com/k8sguide/k8sguide/cmd/k8sguide/app/exec"
	"github.com/k8sguide/k8sguide/cmd/k8sguide/app/get"
	"github.com/k8sguide/k8sguide/cmd/k8sguide/app/internal"
	"github.com/k8sguide/k8sguide/cmd/k8sguide/app/kubectl"
	"github.com/k8sguide/k8sguide/cmd/k8sguide/app/lb"
	"github.com/k8sguide/k8sguide/cmd/k8sguide/app/nodeip"
	"github.com/k8sguide/k8sguide/cmd/k8sguide/app/nodeport"
	"github.com/k8sguide/k8sguide/cmd/k8sguide/app/scale"
	"github.com/k8sguide/k8sguide/cmd/k8sguide/app/snapshot"
	tracecmd "github.com/k8sguide/k8sguide/cmd/k8sguide/app/trace"
	"github.com/k8sguide/k8sguide/cmd/k8sguide/app/up"
	"github.com/k8sguide/k8sguide/lab"
)

// NewCommand returns the root command.
func NewCommand(streams lab.Streams) *cobra.Command {
	root := &cobra.Command{
		Use:           "k8sguide",
		Short:         "Kubernetes Service networking labs: build one, send packets, see the path",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.Err)
	root.AddCommand(
		up.NewCommand(streams),
		down.NewCommand(streams),
		get.NewCommand(streams),
		deploy.NewCommand(streams),
		scale.NewCommand(streams),
		connect.NewCommand(streams),
		scenario.NewCommand(streams),
		nodeport.NewCommand(streams),
		nodeip.NewCommand(streams),
		execcmd.NewCommand(streams),
		kubectl.NewCommand(streams),
		snapshot.NewCommand(streams),
		tracecmd.NewCommand(streams),
		compare.NewCommand(streams),
		lb.NewCommand(streams),
		internal.NewCommand(streams),
	)
	return root
}

// Run runs k8sguide and returns its exit status. Errors are one line on stderr; `exec` passes on the exit
// status of the command it ran. SIGINT and SIGTERM cancel the command's context, so commands undo half-made work.
func Run(args []string, in io.Reader, out, errOut io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := NewCommand(lab.Streams{In: in, Out: out, Err: errOut})
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	// A command run for the user (exec's, kubectl) has said what went wrong: pass its status on.
	var exitErr interface{ ExitCode() int }
	if errors.As(err, &exitErr) && exitErr.ExitCode() > 0 {
		return exitErr.ExitCode()
	}
	fmt.Fprintf(errOut, "ERROR: %v\n", err)
	return 1
}
