// Package app assembles k8sguide-lab's commands: `internal …` (lab/nodecmd's node commands, with the handlers
// that run a netns lab's programs) and `kubectl …`.
package app

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/component-base/cli"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"

	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/nodecmd"
)

// Run runs k8sguide-lab and returns its exit status. The node commands crash as Go programs do (their stack
// goes to the log their supervisor keeps); their errors are one line on stderr, "ERROR: …", which the caller
// reads (nodecmd). SIGINT and SIGTERM cancel their context.
func Run(args []string) int {
	if len(args) > 0 && args[0] == lab.LabKubectl {
		return kubectl(args[1:])
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	streams := lab.Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}
	root := &cobra.Command{
		Use:           "k8sguide-lab",
		Short:         "the programs a k8sguide lab runs, and kubectl; k8sguide starts it",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(nodecmd.NewCommand(streams, handlers()), ciliumChartCommand())
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "ERROR: %v\n", err)
		return 1
	}
	return 0
}

// kubectl runs kubectl as its own main does (k8s.io/kubectl's cmd/kubectl), with a client that discovers the
// lab's API in one burst rather than at kubectl's default pace.
func kubectl(args []string) int {
	io := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	configFlags := genericclioptions.NewConfigFlags(true).WithDeprecatedPasswordFlag().WithDiscoveryBurst(300).WithDiscoveryQPS(50.0).WithWarningPrinter(io)
	kc := kubectlcmd.NewKubectlCommand(kubectlcmd.KubectlOptions{Arguments: append([]string{"kubectl"}, args...), ConfigFlags: configFlags, IOStreams: io})
	kc.SetArgs(args)
	return cli.Run(kc)
}
