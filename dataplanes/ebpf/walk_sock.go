package ebpf

import (
	"fmt"
	"net/netip"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

const chainSock = "cil_sock4_connect"

// sockProgram is the node's cil_sock4_connect (the socket LB), nil when the node has none.
func (s *State) sockProgram() *Program {
	for i := range s.Programs {
		if p := &s.Programs[i]; p.Attach == "cgroup" && p.Name == chainSock {
			return p
		}
	}
	return nil
}

// WalkSock follows a connection the node itself opens through bpf_sock's cil_sock4_connect, as Cilium v1.20.2's
// __sock4_xlate_fwd does it: the socket LB translates the connect() address itself, before any packet exists,
// so no packet to the frontend is ever sent, no conntrack entry is written, and replies need no reverse NAT in
// the packet path (the socket is connected to the backend). names resolves an address to its pod and node.
func WalkSock(s *State, flow trace.Flow, names func(netip.Addr) (pod, node string)) (paths []trace.Path, notes []string, ct *trace.Conntrack) {
	return walkSock(s, flow, nil, names)
}

// walkSock is WalkSock for a socket of the node (sender nil) or of its pod sender: where the socket LB covers
// pods (ENABLE_SOCKET_LB_FULL, Cilium's default with kube-proxy replacement), a pod's connect() is translated
// the same way, before bpf_lxc ever sees a packet.
func walkSock(s *State, flow trace.Flow, sender *EndpointEntry, names func(netip.Addr) (pod, node string)) (paths []trace.Path, notes []string, ct *trace.Conntrack) {
	w := &walker{s: s, flow: flow, names: names, chain: chainSock, hook: "cgroup connect4", sender: sender}
	w.prog = s.sockProgram()
	if w.prog != nil {
		w.hook = w.prog.Hook()
		if c := s.config(w.prog.ConfigMap); c != nil {
			w.cfg, w.cfgKnown = *c, true
		}
	}
	if !w.cfgKnown {
		w.cfg = Config{EnableNoServiceEndpointsRoutable: true, NodePortMin: 30000, NodePortMax: 32767}
		w.note("no load-time configuration of cil_sock4_connect was read: the walk assumes Cilium's defaults")
	}
	w.runSock()
	if sender == nil && s.NodeConfig == nil && w.prog != nil {
		// The netns lab (no Cilium node_config.h) attaches the socket LB to each node's own cgroup, never to the
		// host's root: only the node's processes are in it. Cilium on a real node attaches it at the cgroup
		// root, where every process of the node is.
		w.note("the socket LB is attached to the node's cgroup: it translates connect() of the node's processes (`k8sguide exec NODE -- …` runs there); a process that only enters the node's network namespace (`ip netns exec LAB-NODE …`) is outside that cgroup, so its connection to a Service leaves untranslated and, for a ClusterIP, nothing answers")
	}
	return w.paths, w.notes, w.ct
}

func (w *walker) runSock() {
	start := branch{prob: 1}
	if !w.l4(start, "sock_proto_enabled is false", "the socket LB translates TCP and UDP only: connect() goes on untranslated") {
		return
	}
	if w.proto == 17 {
		w.note("for UDP the socket LB picks the slot from the socket's cookie (sock_local_cookie), which is not known before the socket exists: each backend is shown with an equal share")
	}
	hn := w.hop("", "ctx_in_hostns", "the socket is the node's own (its network namespace is HOST_NETNS_COOKIE)")
	hn.Matched = true
	hn.Reason = "the node's own process: the socket LB translates its connect(); a pod's sockets are left to bpf_lxc (socketLB.hostNamespaceOnly)"
	if w.sender == nil && w.s.NodeConfig != nil && w.s.NodeConfig.SocketLB == SocketLBFull {
		hn.Text = "is the socket the host network namespace's?"
		hn.Reason = fmt.Sprintf("whichever it is: built with ENABLE_SOCKET_LB_FULL (%s), the socket LB translates every socket below the node's cgroup root, the node's own processes' and its pods'", w.s.NodeConfig.Path)
	}
	if w.sender != nil {
		hn = w.hop("", "ctx_in_hostns", "is the socket the host network namespace's? No: it is the pod's")
		hn.Matched = true
		hn.Reason = fmt.Sprintf("built with ENABLE_SOCKET_LB_FULL (%s: socketLB.hostNamespaceOnly off), the socket LB translates a pod's connect() too: the pod's cgroup is below the node's cgroup root, where cil_sock4_connect is attached", w.s.NodeConfig.Path)
	}
	b := start.with(hn)

	b, svc, ok := w.eastWestLookup(b, "bpf_sock's wildcard lookup (sock4_wildcard_lookup_full) for a NodePort on one of the node's own addresses",
		"connect() goes on to the address as given (-ENXIO: no translation)")
	if !ok {
		return
	}
	if svc.Value.Count == 0 {
		last := &b.hops[len(b.hops)-1]
		if w.cfg.EnableNoServiceEndpointsRoutable {
			addReason(last, "the Service has no backends: connect() fails at once with EHOSTUNREACH (enable_no_service_endpoints_routable)")
			last.Verdict = "connect() fails: -EHOSTUNREACH"
			w.finish(b, trace.Rejected, last, trace.Path{})
			return
		}
		w.pass(b, "the Service has no backends and enable_no_service_endpoints_routable is off: connect() goes on untranslated")
		return
	}
	if svc.Value.ServiceFlags()&FlagSessionAffinity != 0 {
		w.note(fmt.Sprintf("the socket LB keeps session affinity per network namespace (%s keyed by the netns cookie, not by address): an earlier connection from this node pins its backend; the walk shows a first connection's choice", MapAffinity))
	}
	for _, c := range w.slotsSock(b, svc) {
		w.sockBackend(c, svc)
	}
}

// slotsSock is the socket LB's choice: slot (sock_select_slot() % count) + 1, random for TCP, whatever the
// node's default algorithm (bpf_sock has no Maglev).
func (w *walker) slotsSock(b branch, svc ServiceEntry) []choice {
	n := int(svc.Value.Count)
	slots := make([]uint16, n)
	for i := range slots {
		slots[i] = uint16(i + 1)
	}
	return w.slots(b, svc, slots, "sock_select_slot, __lb4_lookup_backend_slot", fmt.Sprintf("sock_select_slot: get_prandom_u32() %% %d + 1", n))
}

// sockBackend is the end of __sock4_xlate_fwd: the backend, the socket's reverse-NAT entry, the rewritten
// connect() address; then the node's routing takes the connection to the backend.
func (w *walker) sockBackend(c choice, svc ServiceEntry) {
	f := w.flow
	h, be, dst, ok := w.lookupBackend(c.id, "__lb4_lookup_backend")
	if !ok {
		h.Reason = fmt.Sprintf("no backend %d: connect() fails with EHOSTUNREACH", c.id)
		h.Verdict = "connect() fails: -EHOSTUNREACH"
		b := c.b.with(h)
		w.finish(b, trace.Rejected, &b.hops[len(b.hops)-1], trace.Path{})
		return
	}
	h.Verdict = "connect() to " + dst.String()
	h.Changes = []string{
		fmt.Sprintf("the socket's destination %s -> %s (user_ip4, user_port): no packet to the frontend is ever sent", netip.AddrPortFrom(f.Dst, f.Dport), dst),
		fmt.Sprintf("cilium_lb4_reverse_sk: {socket cookie, %s} -> %s, rev-NAT %d (new; removed when the socket is released)", dst, netip.AddrPortFrom(f.Dst, f.Dport), svc.Value.RevNAT),
	}
	b := c.b.with(h)
	p := trace.Path{Endpoint: w.endpoint(dst)}
	// The source is the kernel's choice for the route to the backend: an unbound socket takes it at connect().
	src, how := w.sockSource(be.Value.Address)
	p.SNAT = src.String()
	ekey, _ := EndpointKey{Address: be.Value.Address, Family: EndpointIPv4}.MarshalBinary()
	eh := w.hop(MapEndpoints, "__lookup_ip4_endpoint", fmt.Sprintf("is %s a pod of this node? (key %s)", be.Value.Address, Hex(ekey)))
	switch ep, local := w.s.endpoint(be.Value.Address); {
	case w.sender != nil && be.Value.Address == w.sender.Key.Address:
		// A pod's socket: its packets leave through the pod's own interface, to the backend's address.
		eh.Matched = true
		eh.Verdict = "the pod itself: the kernel delivers the connection inside the pod's network namespace (its own address is local there); no packet leaves the pod"
		p.Egress = "the pod's own network namespace (no packet leaves it)"
	case w.sender != nil && local && ep.Value.Flags&EndpointFlagHost == 0:
		eh.Matched = true
		eh.Verdict = fmt.Sprintf("local endpoint %d: the packet leaves the pod's veth already addressed to the backend; cil_from_container finds no Service for it and delivers it to endpoint %d's veth", ep.Value.LxcID, ep.Value.LxcID)
		p.Egress = fmt.Sprintf("the pod's veth, then endpoint %d's veth (ifindex %d)", ep.Value.LxcID, ep.Value.Ifindex)
	case w.sender != nil:
		eh.Reason = "not a local endpoint: the packet leaves the pod's veth already addressed to the backend, and bpf_lxc routes it to the backend's node"
		p.Egress = "the pod's veth, then the node's route to " + be.Value.Address.String()
	case local && ep.Value.Flags&EndpointFlagHost == 0:
		eh.Matched = true
		eh.Verdict = fmt.Sprintf("local endpoint %d: out through cilium_host, where cil_from_host delivers it to the pod's veth", ep.Value.LxcID)
		p.Egress = fmt.Sprintf("cilium_host, then endpoint %d's veth (ifindex %d)", ep.Value.LxcID, ep.Value.Ifindex)
	default:
		eh.Reason = "not a local endpoint: the node routes the connection out to the backend's node"
		p.Egress = "the node's route to " + be.Value.Address.String()
	}
	addReason(&eh, how)
	b = b.with(eh)
	w.sockReply(&p, dst, src)
	w.finish(b, trace.Delivered, nil, p)
}

// sockReply is the reply of a connection the socket LB translated: it belongs to a socket connected to the
// backend.
func (w *walker) sockReply(p *trace.Path, dst netip.AddrPort, src netip.Addr) {
	f := w.flow
	p.Reply = &trace.Reply{
		From:       dst.String(),
		To:         netip.AddrPortFrom(src, f.Sport).String(),
		AsSeenFrom: dst.String(),
		AsSeenTo:   netip.AddrPortFrom(src, f.Sport).String(),
		Text: fmt.Sprintf("the reply %s -> %s belongs to a socket connected to the backend: no reverse NAT in the packet path; only recvmsg on an unconnected UDP socket (cil_sock4_recvmsg) rewrites the address back to the frontend through cilium_lb4_reverse_sk",
			dst, src),
	}
	if f.Sport == 0 {
		p.Reply.To = src.String() + ":PORT"
		p.Reply.AsSeenTo = p.Reply.To
	}
}

// sockSource is the source address the kernel gives a socket connecting to backend: cilium_host's address for
// a pod of this node (the pod CIDR's route, `via ROUTER dev cilium_host src ROUTER`), else the packet's own
// source (the node's address towards the frontend, which takes the same route out of eth0 as other nodes'
// pod CIDRs).
func (w *walker) sockSource(backend netip.Addr) (netip.Addr, string) {
	if w.sender != nil {
		return w.sender.Key.Address, fmt.Sprintf("the pod's socket: its source is the pod's address %s", w.sender.Key.Address)
	}
	if ep, ok := w.s.endpoint(backend); ok && ep.Value.Flags&EndpointFlagHost == 0 {
		for _, p := range w.s.Programs {
			if p.Interface == "cilium_host" {
				for _, a := range p.Addrs {
					return a.Addr(), fmt.Sprintf("a pod of this node, routed via cilium_host, whose address %s is the source", a.Addr())
				}
			}
		}
		w.note("cilium_host's address was not read: the source of a connection to a pod of this node is assumed to be the node's address")
	}
	return w.flow.Src, fmt.Sprintf("routed out of the node's network interface, source %s", w.flow.Src)
}
