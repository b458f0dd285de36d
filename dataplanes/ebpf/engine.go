package ebpf

import (
	"encoding/json"
	"fmt"
	"net/netip"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// Engine is the ebpf engine's faces (Cilium's datapath as kube-proxy replacement). Its part of a snapshot is the
// node's State: the maps, the programs attached to the interfaces and their load-time constants.
type Engine struct{}

func (Engine) Name() dataplanes.Name { return dataplanes.EBPF }

// Sniff: no tool prints Cilium's maps in a form this engine reads; `lb list --bpffs` reads a node's pins.
func (Engine) Sniff(string) (dataplanes.Sniffed, bool, error) {
	return dataplanes.Sniffed{}, false, nil
}

// Decode reads the engine's part of a snapshot.
func Decode(raw json.RawMessage) (*State, error) {
	var st State
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, fmt.Errorf("ebpf part: %v", err)
	}
	return &st, nil
}

// Open makes the maps ready for the walk. bpf_host takes the packet at tc ingress, before netfilter, and
// redirects it past the node's stack, so the engine walks it itself rather than as a netfilter ruleset.
func (Engine) Open(raw json.RawMessage, o dataplanes.OpenOptions) (*dataplanes.Opened, error) {
	st, err := Decode(raw)
	if err != nil {
		return nil, err
	}
	return &dataplanes.Opened{Serves: true, Walker: walkerOf{st: st, node: o.Node}}, nil
}

type walkerOf struct {
	st   *State
	node string
}

// Walk follows the packet through bpf_host's cil_from_netdev on iif, a pod's through its bpf_lxc, and a
// connection the node itself opens through the socket LB (bpf_sock's cil_sock4_connect).
func (w walkerOf) Walk(flow trace.Flow, iif string, fromNode bool, names netfilter.Names) ([]trace.Path, []string, *trace.Conntrack, error) {
	var paths []trace.Path
	var notes []string
	var ct *trace.Conntrack
	switch {
	case fromNode && w.st.sockProgram() == nil:
		return nil, nil, nil, fmt.Errorf("--from node: on an ebpf node a connection the node makes goes to Cilium's load-balancer only through the socket LB (bpf_sock), and %s has no cil_sock4_connect attached (pinned in %s); trace from the client or a pod", w.node, SockLinksDir(w.st.BPFFS))
	case fromNode:
		paths, notes, ct = WalkSock(w.st, flow, names)
	default:
		paths, notes, ct = WalkFrom(w.st, flow, iif, names)
	}
	if len(paths) == 0 {
		return nil, nil, nil, fmt.Errorf("the Cilium maps of %s gave no path for %s", w.node, netip.AddrPortFrom(flow.Dst, flow.Dport))
	}
	return paths, notes, ct, nil
}
