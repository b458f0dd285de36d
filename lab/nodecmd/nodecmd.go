// Package nodecmd is the protocol between the k8sguide on the user's side and the k8sguide that runs inside a
// lab's node or pod (`k8sguide internal collect|kernel-trace|connect|counters|kube-proxy|pod-server|node-init|node-agent|
// control-plane|pki`, hidden from users). Each command has one file here holding both ends: the argv the caller
// builds (and, where the command answers, the reading of its answer) and the handler that parses those flags and
// writes that answer. A change to a flag or to an answer's format is then one file, and a test can run both ends
// against each other.
//
// The work behind most handlers lives above this package (a snapshot collector, the kernel tracer) or in the
// provider that starts the process (a node's agent, kube-proxy and control plane), so NewCommand takes it as
// Handlers; pod-server and connect call lab/podserver directly.
package nodecmd

import (
	"context"
	"errors"
	"strings"

	"github.com/spf13/cobra"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/lab"
)

// Group is the hidden command group every node command sits under.
const Group = "internal"

// Exec runs argv inside the place (node, pod or the lab's client) the caller chose, as lab.Provider.Exec does.
type Exec func(ctx context.Context, argv []string, streams lab.Streams) error

// Handlers do the work of the commands whose work lives above this package.
type Handlers struct {
	// Collect reads the node's engines and network into a snapshot (inspect/snapshot.Collect), or only what one
	// packet's trace reaches when forPacket is set (inspect/tracer.CollectFor); its result is written as JSON.
	Collect func(ctx context.Context, bpffs, forPacket string) (any, error)
	// KernelTrace starts the kernel's trace of one flow (inspect/kerneltrace.Start); stop ends it and returns
	// the event lines.
	KernelTrace func(ctx context.Context, engine string, f trace.Flow) (stop func() ([]string, error), err error)
	// KubeProxy runs upstream kube-proxy with its own command line, until it fails.
	KubeProxy func(ctx context.Context, args []string) error
	// NodeInit, NodeAgent, ControlPlane and PKI are the netns provider's node init and agent, control plane
	// and certificates.
	NodeInit     func(ctx context.Context, labName, node string, apiListenerFD int) error
	NodeAgent    func(ctx context.Context, labName, node string, apiListenerFD int) error
	ControlPlane func(ctx context.Context, labName string) error
	PKI          func(ctx context.Context, labName string) error
}

// NewCommand returns the hidden command group: pod-server and connect, and each command whose handler h has.
// The CLI has the ones it runs in a node itself (collect, kernel-trace); k8sguide-lab, the program a netns
// lab's namespaces run, has them all.
func NewCommand(streams lab.Streams, h Handlers) *cobra.Command {
	cmd := &cobra.Command{Use: Group, Hidden: true, Short: "processes k8sguide runs inside a lab's nodes and pods"}
	cmd.AddCommand(podServerCommand(), connectCommand(streams), countersCommand(streams))
	if h.Collect != nil {
		cmd.AddCommand(collectCommand(streams, h.Collect))
	}
	if h.KernelTrace != nil {
		cmd.AddCommand(kernelTraceCommand(streams, h.KernelTrace))
	}
	if h.KubeProxy != nil {
		cmd.AddCommand(kubeProxyCommand(h.KubeProxy))
	}
	for name, run := range map[string]func(ctx context.Context, labName, node string, apiListenerFD int) error{"node-init": h.NodeInit, "node-agent": h.NodeAgent} {
		if run != nil {
			cmd.AddCommand(nodeAgentCommand(name, run))
		}
	}
	for name, run := range map[string]func(ctx context.Context, labName string) error{"control-plane": h.ControlPlane, "pki": h.PKI} {
		if run != nil {
			cmd.AddCommand(labCommand(name, run))
		}
	}
	return cmd
}

// failure is what a node command that failed said: the last line of its stderr (where k8sguide writes
// "ERROR: ..."), or else run's own error.
func failure(stderr string, err error) error {
	if msg := lastLine(stderr); msg != "" {
		return errors.New(msg)
	}
	return err
}

// lastLine is the last line of a command's stderr without the "ERROR: " prefix k8sguide's main writes: the one
// line a user sees.
func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	lines := strings.Split(s, "\n")
	return strings.TrimPrefix(lines[len(lines)-1], "ERROR: ")
}
