//go:build !linux

package netns

import (
	"context"
	"errors"

	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/state"
)

// ProviderName is the name of this provider.
const ProviderName = "netns"

// errNeedsLinux is this provider on any other system: its nodes are the machine's own network namespaces.
var errNeedsLinux = errors.New("the netns provider needs Linux (its nodes are this machine's network namespaces); " +
	"use --provider kind with Docker")

// New says the provider needs Linux.
func New() (lab.Provider, error) { return nil, errNeedsLinux }

// KernelLabs finds no lab: there are no network namespaces here.
func KernelLabs(context.Context, state.Store) []string { return nil }
