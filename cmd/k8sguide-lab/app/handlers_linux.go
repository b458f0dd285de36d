package app

import (
	"context"
	"os"

	"k8s.io/klog/v2"

	"github.com/k8sguide/k8sguide/cmd/internal/nodecommands"
	"github.com/k8sguide/k8sguide/lab/netns/node"
	"github.com/k8sguide/k8sguide/lab/nodecmd"
	"github.com/k8sguide/k8sguide/lab/state"
)

// handlers are every node command: the CLI's own (collect, kernel-trace) and a netns lab's programs.
func handlers() nodecmd.Handlers {
	h := nodecommands.Handlers()
	h.KubeProxy = node.RunKubeProxy
	h.NodeInit = func(ctx context.Context, labName, nodeName string, apiListenerFD int) error {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		return node.RunNodeInit(klog.NewContext(ctx, klog.Background()), state.Default(), exe, labName, nodeName, apiListenerFD)
	}
	h.NodeAgent = func(ctx context.Context, labName, nodeName string, apiListenerFD int) error {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		return node.RunNodeAgent(klog.NewContext(ctx, klog.Background()), state.Default(), exe, labName, nodeName, apiListenerFD)
	}
	h.ControlPlane = func(ctx context.Context, labName string) error {
		return node.RunControlPlane(ctx, state.Default(), labName)
	}
	h.PKI = func(ctx context.Context, labName string) error {
		return node.WritePKI(ctx, state.Default(), labName)
	}
	return h
}
