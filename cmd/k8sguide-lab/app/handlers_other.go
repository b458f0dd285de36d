//go:build !linux

package app

import (
	"github.com/k8sguide/k8sguide/cmd/internal/nodecommands"
	"github.com/k8sguide/k8sguide/lab/nodecmd"
)

// handlers are the node commands there are off Linux: the CLI's own (a netns lab needs Linux).
func handlers() nodecmd.Handlers { return nodecommands.Handlers() }
