package nodecmd

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

// node-init: a netns lab node's init, in the place of the PID 1 (systemd) of a kind node's container: started
// detached by the provider in the node's namespace, it runs the node's agent and starts it again whenever it
// dies, and reaps what the agent leaves.
//
// node-agent: a netns lab node's agent, in the place of kind's kubelet (and, on the control-plane node, of the
// kubeadm init that kind runs there); started detached by the provider in the node's namespace, it runs until
// killed. It answers through the lab's apiserver (its Node, Lease and Pods), not on stdout.
//
// control-plane: the lab's control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler in one
// process), which the control-plane node's agent starts and restarts as a kubelet does its static pods.
//
// pki: kubeadm's certs and kubeconfig phases for a lab, run once by `up` before any of the above (kubeadm
// reports each file it writes on stdout, which goes to the lab's log rather than the user's terminal).

// APIListenerFD is the descriptor under which the control-plane node's agent finds the listening socket that
// `up` opened on the host's loopback for the apiserver (the first of exec's extra files).
const APIListenerFD = 3

// NodeAgentArgv is the command line of lab labName's agent on node (exe: this k8sguide). withAPIListener says
// that the caller passes the host's apiserver socket as APIListenerFD.
func NodeAgentArgv(exe, labName, node string, withAPIListener bool) []string {
	argv := []string{exe, Group, "node-agent", "--name", labName, "--node", node}
	if withAPIListener {
		argv = append(argv, "--api-listener-fd", fmt.Sprint(APIListenerFD))
	}
	return argv
}

// NodeInitArgv is the command line of lab labName's init on node; withAPIListener as for NodeAgentArgv (the
// init hands the socket on to each agent it starts, under the same descriptor).
func NodeInitArgv(exe, labName, node string, withAPIListener bool) []string {
	argv := NodeAgentArgv(exe, labName, node, withAPIListener)
	argv[2] = "node-init"
	return argv
}

// ControlPlaneArgv is the command line of lab labName's control plane.
func ControlPlaneArgv(exe, labName string) []string {
	return []string{exe, Group, "control-plane", "--name", labName}
}

// PKIArgv is the command line that writes lab labName's certificates and kubeconfigs.
func PKIArgv(exe, labName string) []string {
	return []string{exe, Group, "pki", "--name", labName}
}

func nodeAgentCommand(use string, run func(ctx context.Context, labName, node string, apiListenerFD int) error) *cobra.Command {
	var name, node string
	fd := -1
	cmd := &cobra.Command{
		Use:  use,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if run == nil {
				return fmt.Errorf("this k8sguide has no %s", use)
			}
			return run(cmd.Context(), name, node, fd)
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "lab name")
	cmd.Flags().StringVar(&node, "node", "", "node name")
	cmd.Flags().IntVar(&fd, "api-listener-fd", -1, "descriptor of the host's listening socket for the apiserver")
	return cmd
}

// labCommand is a hidden command whose only flag is the lab's name.
func labCommand(use string, run func(ctx context.Context, labName string) error) *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:  use,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if run == nil {
				return fmt.Errorf("this k8sguide has no %s", use)
			}
			return run(cmd.Context(), name)
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "lab name")
	return cmd
}
