package nodecmd

import (
	"strconv"

	"github.com/spf13/cobra"

	"github.com/k8sguide/k8sguide/lab/podserver"
)

// pod-server: a netns lab pod's server in place of its container image (lab/podserver), started detached in the
// pod's namespace by its node's agent, which probes its readiness as a kubelet would.

// PodServerArgv is the command line that serves pod on node: HTTP on the TCP ports, an echo on the UDP ports
// (exe: this k8sguide).
func PodServerArgv(exe, pod, node string, tcp, udp []int) []string {
	argv := []string{exe, Group, "pod-server", "--pod", pod, "--node", node}
	for _, port := range tcp {
		argv = append(argv, "--port", strconv.Itoa(port))
	}
	for _, port := range udp {
		argv = append(argv, "--udp-port", strconv.Itoa(port))
	}
	return argv
}

func podServerCommand() *cobra.Command {
	var pod, node string
	var ports, udp []int
	cmd := &cobra.Command{
		Use:  "pod-server",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return podserver.Serve(cmd.Context(), pod, node, ports, udp)
		},
	}
	cmd.Flags().StringVar(&pod, "pod", "", "pod name")
	cmd.Flags().StringVar(&node, "node", "", "node name")
	cmd.Flags().IntSliceVar(&ports, "port", nil, "TCP ports to serve HTTP on")
	cmd.Flags().IntSliceVar(&udp, "udp-port", nil, "UDP ports to echo on")
	return cmd
}
