// Package engines is the one list of k8sguide's engines. The snapshot's collector, the tracer, `trace
// --snapshot`'s sniffing and verification loop over it; adding an engine is a folder under dataplanes/ and a
// line here.
package engines

import (
	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/ebpf"
	"github.com/k8sguide/k8sguide/dataplanes/iptables"
	"github.com/k8sguide/k8sguide/dataplanes/ipvs"
	"github.com/k8sguide/k8sguide/dataplanes/nftables"
)

// All lists the engines in the guide's order, which is also the order they are opened and asked whether they
// serve a node's Services: iptables comes before nftables, whose walk leaves out the tables iptables-nft holds.
var All = []dataplanes.Engine{iptables.Engine{}, nftables.Engine{}, ipvs.Engine{}, ebpf.Engine{}}

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
