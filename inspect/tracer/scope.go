package tracer

import (
	"context"
	"fmt"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/engines"
	"github.com/k8sguide/k8sguide/inspect/snapshot"
)

// ScopeRequest is what a collector inside a node needs to read only what one packet's trace reaches
// (CollectFor): the trace's request, and the Kubernetes names its walk reads (the client's address; the pod a
// `--from pod/NAME` packet leaves).
type ScopeRequest struct {
	Request    Request              `json:"request"`
	Kubernetes *snapshot.Kubernetes `json:"kubernetes,omitempty"`
}

// CollectFor reads the node the calling process runs in for one packet: what the walks of r.Request reach,
// instead of every engine's whole state. It reads each engine's entry points (the built-in chains of
// iptables-nft's tables) and the node's network, then walks the packet here, each jump to a chain the snapshot
// lacks reading that chain (dataplanes.Scope), and writes the parts from what was read. On a node with thousands
// of Services this lists a fifth of the rules. Engines that cannot read a part of their state (nftables, IPVS,
// Cilium's maps, legacy iptables) read all of it, as Collect does. When the walk cannot run here (a pod the
// request names that r lacks), everything is read.
func CollectFor(ctx context.Context, bpffs string, r ScopeRequest) (*snapshot.Snapshot, error) {
	scopes := map[dataplanes.Name]*dataplanes.Scope{}
	for _, e := range engines.All {
		scopes[e.Name()] = &dataplanes.Scope{Context: ctx, Packet: packetWords(r.Request)}
	}
	s, err := snapshot.CollectScoped(ctx, bpffs, scopes)
	if err != nil {
		return nil, err
	}
	readInPart := false
	for _, sc := range scopes {
		readInPart = readInPart || sc.Read != nil
	}
	if !readInPart {
		// Every engine read its state whole (an nftables-mode node has no iptables-nft table to read chain by
		// chain): a walk here would read nothing more, and parsing a 5,000-Service ruleset for it costs half a
		// second of CPU the trace then spends again.
		return s, nil
	}
	s.Kubernetes = r.Kubernetes
	op := &Opened{snap: s, scopes: scopes}
	req := r.Request
	req.Quiet = true // where the packet goes is all the reads need, not each rule it passed
	_, err = op.Trace(req)
	s.Kubernetes = nil
	if err != nil {
		return snapshot.Collect(ctx, bpffs)
	}
	for name, sc := range scopes {
		if sc.Read != nil {
			if err := s.Recollect(ctx, bpffs, name, sc); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// Unread names, by engine, what the walks so far reached that a part read for one packet lacks (CollectFor).
func (op *Opened) Unread() map[dataplanes.Name][]string {
	if op.opened == nil {
		return nil
	}
	out := map[dataplanes.Name][]string{}
	for name, rs := range op.opened.scoped {
		for _, r := range rs {
			out[name] = append(out[name], r.Unread()...)
		}
		if len(out[name]) == 0 {
			delete(out, name)
		}
	}
	return out
}

// packetWords describes the request's packet for a part read for it ("tcp to 172.18.0.2:30080 from client").
func packetWords(r Request) string {
	proto := strings.ToLower(r.Proto)
	if proto == "" {
		proto = "tcp"
	}
	from := r.From
	if from == "" {
		from = "client"
	}
	if r.Src != "" {
		from += " " + r.Src
	}
	return fmt.Sprintf("%s to %s from %s", proto, r.Dst, from)
}
