// Package engines is the one list of k8sguide's engines, and so of its dataplanes. The snapshot's collector, the
// tracer, `trace --snapshot`'s sniffing and verification loop over it, and every list of dataplanes derives from
// it: `up --dataplane` and `doctor`, the providers (through each engine's lab face), the scenarios and their
// report. Adding a dataplane is a folder under dataplanes/ and a line here (CONTRIBUTING.md).
package engines

import (
	"fmt"
	"slices"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/ebpf"
	"github.com/k8sguide/k8sguide/dataplanes/iptables"
	"github.com/k8sguide/k8sguide/dataplanes/ipvs"
	"github.com/k8sguide/k8sguide/dataplanes/nftables"
)

// All lists the engines in the guide's order, which is also the order they are opened and asked whether they
// serve a node's Services: iptables comes before nftables, whose walk leaves out the tables iptables-nft holds.
var All = []dataplanes.Engine{iptables.Engine{}, nftables.Engine{}, ipvs.Engine{}, ebpf.Engine{}}

// Names lists every dataplane, in All's order (the guide's). It is read from All on every call: a test may add
// an engine to All.
func Names() []dataplanes.Name {
	names := make([]dataplanes.Name, len(All))
	for i, e := range All {
		names[i] = e.Name()
	}
	return names
}

// Parse checks a --dataplane value (or a scenario's): one of Names.
func Parse(s string) (dataplanes.Name, error) {
	if _, ok := Get(dataplanes.Name(s)); ok {
		return dataplanes.Name(s), nil
	}
	return "", fmt.Errorf("unknown dataplane %q (want one of %s)", s, List())
}

// List is Names for a message or a flag's help: "iptables, nftables, ipvs, ebpf".
func List() string {
	s := make([]string, 0, len(All))
	for _, n := range Names() {
		s = append(s, string(n))
	}
	return strings.Join(s, ", ")
}

// Lab is a dataplane's lab face; ok is false for a name no engine has.
func Lab(name dataplanes.Name) (l dataplanes.Lab, ok bool) {
	e, ok := Get(name)
	if !ok {
		return l, false
	}
	return e.Lab(), true
}

// Live is a dataplane's face for a running node's readers; ok is false for a name no engine has.
func Live(name dataplanes.Name) (l dataplanes.Live, ok bool) {
	e, ok := Get(name)
	if !ok {
		return l, false
	}
	return e.Live(), true
}

// Order is a dataplane's place in All, for sorting results the guide's way; an unknown name goes last.
func Order(name dataplanes.Name) int {
	if i := slices.Index(Names(), name); i >= 0 {
		return i
	}
	return len(All)
}

// Get returns the engine of a name.
func Get(name dataplanes.Name) (dataplanes.Engine, bool) {
	for _, e := range All {
		if e.Name() == name {
			return e, true
		}
	}
	return nil, false
}

// Lenient is the engine that reads a pasted dump no other engine recognises: iptables-save fragments (grep'd
// lines, no header) are the commonest paste, and its parser then says which line is wrong.
var Lenient dataplanes.Engine = iptables.Engine{}
