// Package kubectl implements `k8sguide kubectl ARGS...`: the kubectl built from k8s.io/kubectl, pointed at a
// lab's apiserver, so that the guide's own commands work without installing anything.
package kubectl

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/component-base/cli"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"

	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/providers"
)

type flags struct{ Name string }

// NewCommand returns the kubectl command.
func NewCommand(streams lab.Streams) *cobra.Command {
	f := &flags{}
	cmd := &cobra.Command{
		Use:   "kubectl [--name LAB] [--] KUBECTL-ARGS...",
		Short: "Run kubectl (built in, Kubernetes 1.36) against a lab",
		Example: "  k8sguide kubectl create deployment web --image=nginx\n" +
			"  k8sguide kubectl expose deployment web --port=80 --type=NodePort\n" +
			"  k8sguide kubectl --name other-lab get nodes -o wide",
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 && args[0] == "--" { // with interspersed flags off, cobra keeps the separator
				args = args[1:]
			}
			p, err := providers.ForLabFlag(&f.Name, cmd.Flags().Changed("name"))
			if err != nil {
				return err
			}
			kubeconfig, err := p.Kubeconfig(cmd.Context(), f.Name)
			if err != nil {
				return err
			}
			file, err := os.CreateTemp("", "k8sguide-kubeconfig-*")
			if err != nil {
				return err
			}
			defer os.Remove(file.Name())
			_, err = file.Write(kubeconfig)
			if cerr := file.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			return run(file.Name(), args, streams)
		},
	}
	cmd.Flags().StringVar(&f.Name, "name", "", providers.NameUsage)
	// Everything after k8sguide's own flags is kubectl's.
	cmd.Flags().SetInterspersed(false)
	return cmd
}

// exitStatus is kubectl's exit status once it has printed its own error.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("kubectl exited with status %d", int(e)) }
func (e exitStatus) ExitCode() int { return int(e) }

// run runs kubectl as its main does, with its fatal errors (which exit the process) turned into an exit status
// returned here, so that the temporary kubeconfig is removed.
func run(kubeconfig string, args []string, streams lab.Streams) (err error) {
	io := genericiooptions.IOStreams{In: streams.In, Out: streams.Out, ErrOut: streams.Err}
	configFlags := genericclioptions.NewConfigFlags(true).WithDeprecatedPasswordFlag().WithDiscoveryBurst(300).WithDiscoveryQPS(50.0).WithWarningPrinter(io)
	configFlags.KubeConfig = &kubeconfig
	kc := kubectlcmd.NewKubectlCommand(kubectlcmd.KubectlOptions{Arguments: append([]string{"kubectl"}, args...), ConfigFlags: configFlags, IOStreams: io})
	kc.SetArgs(args)
	defer func() {
		if r := recover(); r != nil {
			code, ok := r.(exitStatus)
			if !ok {
				panic(r)
			}
			err = code
		}
		cmdutil.DefaultBehaviorOnFatal()
	}()
	cmdutil.BehaviorOnFatal(func(msg string, code int) {
		if msg != "" {
			fmt.Fprint(streams.Err, msg)
			if msg[len(msg)-1] != '\n' {
				fmt.Fprintln(streams.Err)
			}
		}
		panic(exitStatus(code))
	})
	if err := cli.RunNoErrOutput(kc); err != nil {
		cmdutil.CheckErr(err)
	}
	return nil
}
