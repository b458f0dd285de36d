package ebpf

import (
	"fmt"
	"net/netip"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// EndpointFlagHost is ENDPOINT_F_HOST: a cilium_lxc entry that is one of the node's own addresses.
const EndpointFlagHost = 1

// defaultServiceLoopback is the agent's default --ipv4-service-loopback-address, the source of a pod's packet
// its own Service sends back to it.
var defaultServiceLoopback = netip.MustParseAddr("169.254.42.1")

// newContainerWalker walks a packet a pod of this node sends: bpf_lxc's cil_from_container on the pod's
// host-side veth takes it (tail call CILIUM_CALL_IPV4_FROM_LXC), and, built without the socket LB
// (ENABLE_PER_PACKET_LB), balances Services per packet in __per_packet_lb_svc_xlate_4.
func newContainerWalker(s *State, flow trace.Flow, sender EndpointEntry, names func(netip.Addr) (string, string)) *walker {
	w := &walker{s: s, flow: flow, names: names, chain: chainContainer, sender: &sender, hook: "tcx ingress lxc"}
	for i := range s.Programs {
		p := &s.Programs[i]
		if p.Direction == "ingress" && p.Name == chainContainer && uint32(p.Ifindex) == sender.Value.Ifindex {
			w.prog, w.hook = p, p.Hook()
			if c := s.config(p.ConfigMap); c != nil {
				w.cfg, w.cfgKnown = *c, true
			}
		}
	}
	if w.prog == nil {
		w.note(fmt.Sprintf("no cil_from_container is attached to ifindex %d (endpoint %d's veth) in the collected namespace: the walk shows what bpf_lxc would do", sender.Value.Ifindex, sender.Value.LxcID))
	}
	if !w.cfgKnown {
		w.cfg = Config{LBDefaultAlg: AlgRandom, NodePortMin: 30000, NodePortMax: 32767, EnableNoServiceEndpointsRoutable: true}
		w.note("no load-time configuration of cil_from_container was read: the walk assumes Cilium's defaults (random selection, Services without backends drop)")
	}
	return w
}

// runContainer is __per_packet_lb_svc_xlate_4: the Service lookup east-west (lb4_lookup_service(&key, true)),
// then lb4_local as on the NodePort path.
func (w *walker) runContainer() {
	start := branch{prob: 1}
	if !w.l4(start, "lb4_extract_tuple finds no service ports", "not TCP or UDP: no service lookup, the packet goes on untranslated") {
		return
	}
	b, svc, ok := w.eastWestLookup(start, "bpf_lxc's wildcard lookup (lb4_lookup_wildcard_service) for a pod's packet to a node's NodePort",
		"bpf_lxc sends it on untranslated (policy, then routing)")
	if !ok {
		return
	}
	w.local(b, svc)
}

// eastWestLookup is lb4_lookup_service(&key, east_west=true), as bpf_lxc and bpf_sock call it: the external
// scope, then the internal one of a Service with two (a traffic policy of Local on one side only, which
// east-west traffic does not follow). A miss ends the branch: wildcard names the wildcard lookup the program
// tries next (not walked), untranslated what then happens to the packet.
func (w *walker) eastWestLookup(b branch, wildcard, untranslated string) (branch, ServiceEntry, bool) {
	f := w.flow
	key := ServiceKey{Address: f.Dst, Port: f.Dport, Proto: w.proto, Scope: ScopeExternal}
	raw, _ := key.MarshalBinary()
	h := w.hop(MapServices, w.eastWestFunction(), fmt.Sprintf("lookup frontend %s slot 0, external scope (key %s)", frontendString(key), Hex(raw)))
	svc, ok := w.s.service(key)
	if !ok {
		h.Reason = w.whyNoFrontend(key)
		if w.chain == chainSock {
			if b, svc, followed, ok := w.sockWildcard(b.with(h), untranslated); followed {
				return b, svc, ok
			}
		}
		w.note("a miss is followed by " + wildcard + ", which the walk does not follow")
		w.pass(b.with(h), "not a Service's frontend: "+untranslated)
		return b, svc, false
	}
	return w.scopes(b, h, svc, key, untranslated)
}

// scopes ends a frontend lookup that matched (hop h): a Service with two scopes is looked up again in the
// internal one, which east-west traffic uses.
func (w *walker) scopes(b branch, h trace.Hop, svc ServiceEntry, key ServiceKey, untranslated string) (branch, ServiceEntry, bool) {
	h.Matched = true
	h.Verdict = fmt.Sprintf("frontend: count %d, rev-NAT %d, [%s]", svc.Value.Count, svc.Value.RevNAT, svc.Value.ServiceFlags())
	h.Text += " value " + svc.Raw.Value.String()
	b = b.with(h)
	if svc.Value.ServiceFlags()&FlagTwoScopes == 0 {
		return b, svc, true
	}
	key.Scope = ScopeInternal
	raw, _ := key.MarshalBinary()
	ih := w.hop(MapServices, "lb4_lookup_service", fmt.Sprintf("two scopes: lookup frontend %s slot 0, internal scope (key %s)", frontendString(key), Hex(raw)))
	isvc, ok := w.s.service(key)
	if !ok {
		ih.Reason = "no internal-scope entry"
		w.pass(b.with(ih), "the Service has no internal scope here: "+untranslated)
		return b, svc, false
	}
	ih.Matched = true
	ih.Verdict = fmt.Sprintf("frontend: count %d, rev-NAT %d, [%s]", isvc.Value.Count, isvc.Value.RevNAT, isvc.Value.ServiceFlags())
	ih.Text += " value " + isvc.Raw.Value.String()
	return b.with(ih), isvc, true
}

// sockWildcard is bpf_sock's sock4_wildcard_lookup_full after a miss: for an address the ipcache says is this
// node's (HOST_ID) or another node's of the cluster (remote-node), the NodePort (or, outside the NodePort range,
// HostPort) frontend on 0.0.0.0. followed is false when the walk cannot follow it (the ipcache was not read, or
// a loopback address, whose lookup depends on the socket being in the host network namespace); ok says whether a
// frontend was found (when followed but not found, the branch has ended untranslated).
func (w *walker) sockWildcard(b branch, untranslated string) (_ branch, _ ServiceEntry, followed, ok bool) {
	f := w.flow
	if len(w.s.IPCache) == 0 || f.Dst.IsLoopback() {
		return b, ServiceEntry{}, false, false
	}
	inRange := f.Dport >= w.cfg.NodePortMin && f.Dport <= w.cfg.NodePortMax
	kind := "HostPort (outside the NodePort range %d-%d): the address must be this node's (HOST_ID)"
	if inRange {
		kind = "NodePort (in the range %d-%d): the address must be a node's of this cluster (HOST_ID or remote-node)"
	}
	h := w.hop(MapIPCache, "sock4_wildcard_lookup_full → lookup_ip4_remote_endpoint", fmt.Sprintf("whose is %s? a wildcard lookup for a "+kind, f.Dst, w.cfg.NodePortMin, w.cfg.NodePortMax))
	info, found := w.s.ipcache(f.Dst)
	switch {
	case !found:
		h.Reason = "no ipcache entry holds the address"
	case inRange && !(info.Value.Identity == IdentityHost || (identityIsRemoteNode(info.Value.Identity) && info.Value.Flags&IPCacheFlagRemoteCluster == 0)):
		h.Reason = fmt.Sprintf("%s has identity %d: not a node of this cluster", info.Key.Prefix(), info.Value.Identity)
	case !inRange && info.Value.Identity != IdentityHost:
		h.Reason = fmt.Sprintf("%s has identity %d: not this node", info.Key.Prefix(), info.Value.Identity)
	default:
		h.Matched = true
		h.Verdict = fmt.Sprintf("%s: identity %d (%s)", info.Key.Prefix(), info.Value.Identity, map[bool]string{true: "this node", false: "a remote node"}[info.Value.Identity == IdentityHost])
	}
	if !h.Matched {
		w.pass(b.with(h), "no wildcard frontend: "+untranslated)
		return b, ServiceEntry{}, true, false
	}
	b = b.with(h)
	key := ServiceKey{Address: netip.IPv4Unspecified(), Port: f.Dport, Proto: w.proto, Scope: ScopeExternal}
	raw, _ := key.MarshalBinary()
	wh := w.hop(MapServices, "sock4_wildcard_lookup_full → lb4_lookup_service", fmt.Sprintf("lookup frontend %s slot 0, external scope (key %s)", frontendString(key), Hex(raw)))
	svc, found := w.s.service(key)
	flags := svc.Value.ServiceFlags()
	switch {
	case !found:
		wh.Reason = "no wildcard frontend for the port"
	case inRange && flags&FlagNodePort == 0:
		wh.Reason = fmt.Sprintf("the wildcard frontend is not a NodePort ([%s])", flags)
	case !inRange && flags&FlagHostPort == 0:
		wh.Reason = fmt.Sprintf("the wildcard frontend is not a HostPort ([%s])", flags)
	case !inRange && flags&FlagLoopback != 0:
		wh.Reason = "a HostPort bound to a loopback address: only loopback destinations take it"
	}
	if wh.Reason != "" {
		w.pass(b.with(wh), untranslated)
		return b, ServiceEntry{}, true, false
	}
	b, svc, ok = w.scopes(b, wh, svc, key, untranslated)
	return b, svc, true, ok
}

// eastWestFunction names the caller of the east-west lookup: bpf_lxc's per-packet LB or the socket LB.
func (w *walker) eastWestFunction() string {
	if w.chain == chainSock {
		return "__sock4_xlate_fwd → lb4_lookup_service"
	}
	return "__per_packet_lb_svc_xlate_4 → lb4_lookup_service"
}

// serviceLoopback is the source bpf_lxc gives a pod's packet that its Service sends back to the pod itself:
// the program's service_loopback_ipv4.
func (w *walker) serviceLoopback() netip.Addr {
	if w.cfgKnown {
		for _, v := range w.cfg.Vars {
			if v.Name == "service_loopback_ipv4" && len(v.Raw) == 4 {
				if a := netip.AddrFrom4([4]byte(v.Raw)); !a.IsUnspecified() {
					return a
				}
			}
		}
	}
	w.note(fmt.Sprintf("service_loopback_ipv4 was not read from bpf_lxc: the walk assumes the agent's default %s", defaultServiceLoopback))
	return defaultServiceLoopback
}

// containerDelivery is the rest of bpf_lxc's egress for a translated packet: lb4_dnat_request (with the hairpin
// SNAT when the backend is the sender), the CT_EGRESS entry (tail call CILIUM_CALL_IPV4_CT_EGRESS), then
// ipv4_forward_to_destination: a local endpoint gets it through its policy program, anything else through the
// FIB (BPF host routing).
func (w *walker) containerDelivery(b branch, svc ServiceEntry, dst netip.AddrPort) {
	f := w.flow
	p := trace.Path{Endpoint: w.endpoint(dst), SNAT: f.Src.String()}
	if dst.Addr() == f.Src {
		lo := w.serviceLoopback()
		h := w.hop(MapCT, "__per_packet_lb_svc_xlate_4", fmt.Sprintf("the backend %s is the sender itself: ct_state.loopback", dst.Addr()))
		h.Matched = true
		h.Verdict = "snat to " + lo.String()
		h.Reason = "a packet from an address to itself would be a martian: lb4_dnat_request rewrites the source to service_loopback_ipv4"
		h.Changes = []string{fmt.Sprintf("saddr %s -> %s", f.Src, lo)}
		b = b.with(h)
		p.SNAT = lo.String()
	}
	ct := CTTuple{Daddr: dst.Addr(), Saddr: f.Src, Dport: dst.Port(), Sport: f.Sport, Nexthdr: w.proto, Flags: TupleOut}
	ch := w.hop(w.ctMap, "tail_ipv4_ct_egress", fmt.Sprintf("tail call CILIUM_CALL_IPV4_CT_EGRESS: lookup CT_EGRESS %s(the translated tuple)", ct))
	ch.Reason = "a new flow: ct_create4 records it with the Service's rev-NAT index, which replies are translated back with"
	ch.Changes = []string{fmt.Sprintf("%s: CT_EGRESS %s-> rev-NAT %d (new)", w.ctMap, ct, svc.Value.RevNAT)}
	b = b.with(ch)
	ekey, _ := EndpointKey{Address: dst.Addr(), Family: EndpointIPv4}.MarshalBinary()
	eh := w.hop(MapEndpoints, "ipv4_forward_to_destination → __lookup_ip4_endpoint", fmt.Sprintf("lookup endpoint %s (key %s)", dst.Addr(), Hex(ekey)))
	ep, local := w.s.endpoint(dst.Addr())
	switch {
	case local && ep.Value.Flags&EndpointFlagHost != 0:
		eh.Matched = true
		eh.Verdict = "the node's own address: pass to the stack"
		p.Egress = "the node's stack"
	case local:
		eh.Matched = true
		eh.Verdict = fmt.Sprintf("local endpoint %d, ifindex %d", ep.Value.LxcID, ep.Value.Ifindex)
		eh.Reason = fmt.Sprintf("ipv4_local_delivery: tail call cilium_call_policy[%d] (the endpoint's cil_lxc_policy), which redirects to its veth", ep.Value.LxcID)
		p.Egress = fmt.Sprintf("endpoint %d's veth (ifindex %d), by its policy program", ep.Value.LxcID, ep.Value.Ifindex)
	default:
		eh.Reason = "not a local endpoint: fib_redirect_v4 (BPF host routing) sends it out of the device the FIB gives for " + dst.Addr().String()
		p.Egress = "fib_redirect: out of the interface and to the next hop the FIB gives for " + dst.Addr().String()
	}
	b = b.with(eh)
	to := netip.AddrPortFrom(f.Src, f.Sport)
	if p.SNAT != f.Src.String() {
		to = netip.AddrPortFrom(netip.MustParseAddr(p.SNAT), f.Sport)
	}
	p.Reply = w.reply(svc, dst, to, false)
	if rv, ok := w.s.revNAT(svc.Value.RevNAT); ok {
		p.Reply.Text = fmt.Sprintf("the reply %s -> %s reaches the sender's endpoint, whose cil_lxc_policy finds the conntrack entry; its rev-NAT index selects %s[%d] = %s, which rewrites the source back to the frontend",
			p.Reply.From, p.Reply.To, MapRevNAT, svc.Value.RevNAT, netip.AddrPortFrom(rv.Value.Address, rv.Value.Port))
		if dst.Addr() == f.Src {
			p.Reply.Text += " (and the loopback destination back to the pod's own address)"
		}
	}
	w.finish(b, trace.Delivered, nil, p)
}
