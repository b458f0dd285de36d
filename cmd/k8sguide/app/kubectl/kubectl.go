// Package kubectl implements `k8sguide kubectl ARGS...`: the kubectl built from k8s.io/kubectl (in k8sguide-lab,
// so that the CLI does not link it), pointed at a lab's apiserver, so that the guide's own commands work
// without installing anything.
package kubectl

import (
	"context"
	"os"
	"os/exec"

	"github.com/spf13/cobra"

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
			return run(cmd.Context(), file.Name(), args, streams)
		},
	}
	cmd.Flags().StringVar(&f.Name, "name", "", providers.NameUsage)
	// Everything after k8sguide's own flags is kubectl's.
	cmd.Flags().SetInterspersed(false)
	return cmd
}

// run runs kubectl (k8sguide-lab's, kubectl's own main) against the lab of kubeconfig. Its exit status, once it
// has printed its own error, is the command's (exec.ExitError's ExitCode); the temporary kubeconfig is removed
// when it ends.
func run(ctx context.Context, kubeconfig string, args []string, streams lab.Streams) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	prog, err := lab.FindLabProgram(self)
	if err != nil {
		return err
	}
	kc := exec.CommandContext(ctx, prog, append([]string{lab.LabKubectl}, args...)...)
	kc.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	kc.Stdin, kc.Stdout, kc.Stderr = streams.In, streams.Out, streams.Err
	return kc.Run()
}
