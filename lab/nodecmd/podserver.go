package nodecmd

import (
	"strconv"

	"github.com/spf13/cobra"

	"github.com/k8sguide/k8sguide/lab/podserver"
)

// pod-server: a netns lab pod's server in place of its container image (lab/podserver), started detached in the
// pod's namespace; the provider knows it is ready when it answers HTTP on its first port.

// PodServerArgv is the command line that serves pod on node at ports (exe: this k8sguide).
func PodServerArgv(exe, pod, node string, ports []int) []string {
	argv := []string{exe, Group, "pod-server", "--pod", pod, "--node", node}
	for _, port := range ports {
		argv = append(argv, "--port", strconv.Itoa(port))
	}
	return argv
}

func podServerCommand() *cobra.Command {
	var pod, node string
	var ports []int
	cmd := &cobra.Command{
		Use:  "pod-server",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return podserver.Serve(cmd.Context(), pod, node, ports)
		},
	}
	cmd.Flags().StringVar(&pod, "pod", "", "pod name")
	cmd.Flags().StringVar(&node, "node", "", "node name")
	cmd.Flags().IntSliceVar(&ports, "port", nil, "TCP ports to serve")
	return cmd
}
