// Package providers picks the lab provider for a command.
package providers

import (
	"fmt"

	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/netns"
)

// Names are the values --provider takes.
var Names = []string{"netns", "kind", "auto"}

// New returns the provider named by --provider. "auto" means kind where a Docker engine answers and netns
// otherwise; this build has only netns.
func New(name string) (lab.Provider, error) {
	switch name {
	case "netns", "auto":
		return netns.New()
	case "kind":
		return nil, fmt.Errorf("the kind provider is not part of this build yet; use --provider netns")
	}
	return nil, fmt.Errorf("unknown provider %q (want netns, kind or auto)", name)
}

// ForLab returns the provider that holds the named lab.
func ForLab(name string) (lab.Provider, error) {
	if err := lab.ValidateName(name); err != nil {
		return nil, err
	}
	return netns.New()
}
