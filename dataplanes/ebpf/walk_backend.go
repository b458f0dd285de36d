package ebpf

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// callNoService is CILIUM_CALL_IPV4_NO_SERVICE: present in cilium_calls only when bpf_host was compiled with
// SERVICE_NO_BACKEND_RESPONSE (the agent's --service-no-backend-response=reject, its default).
const callNoService = 45

// secToMono is bpf_sec_to_mono: seconds, or (s * kernel_hz) >> 8 in u32 arithmetic when the datapath counts
// jiffies.
func (w *walker) secToMono(s uint32) uint64 {
	if w.cfg.EnableJiffies {
		return uint64(s*w.cfg.KernelHZ) >> 8
	}
	return uint64(s)
}

// affinity is __lb4_affinity_backend_id: a client's remembered backend, if still valid. It extends *b with
// the hops that decided and reports whether the remembered backend is used.
func (w *walker) affinity(b *branch, svc ServiceEntry) (choice, bool) {
	f := w.flow
	key := AffinityKey{ClientIP: f.Src, RevNAT: svc.Value.RevNAT}
	raw, _ := key.MarshalBinary()
	timeout := svc.Value.AffinityTimeout()
	h := w.hop(MapAffinity, "lb4_affinity_backend_id_by_addr", fmt.Sprintf("lookup session affinity of client %s for rev-NAT %d (key %s)", f.Src, svc.Value.RevNAT, Hex(raw)))
	var ent *AffinityEntry
	for i := range w.s.Affinity {
		if w.s.Affinity[i].Key == key {
			ent = &w.s.Affinity[i]
		}
	}
	if ent == nil {
		h.Reason = fmt.Sprintf("no entry: the backend chosen below is remembered for %d s", timeout)
		*b = b.with(h)
		return choice{}, false
	}
	h.Text += " value " + ent.Raw.Value.String()
	id := ent.Value.BackendID
	// The entry holds while last_used + timeout > now (now truncated to u32, as the C does).
	until := ent.Value.LastUsed + w.secToMono(timeout)
	unit := w.s.MonoUnit
	if unit == "" {
		unit = "s"
	}
	if w.s.MonoNow != 0 && uint64(uint32(w.s.MonoNow)) >= until {
		h.Reason = fmt.Sprintf("entry for backend %d expired at %d %s (last used %d + %d s timeout; now %d): deleted, a new choice",
			id, until, unit, ent.Value.LastUsed, timeout, w.s.MonoNow)
		*b = b.with(h)
		return choice{}, false
	}
	if !slices.ContainsFunc(w.s.AffinityMatch, func(e AffinityMatchEntry) bool {
		return e.Key == AffinityMatchKey{BackendID: id, RevNAT: svc.Value.RevNAT}
	}) {
		h.Reason = fmt.Sprintf("remembers backend %d, which is no longer a backend of rev-NAT %d (not in %s): deleted, a new choice", id, svc.Value.RevNAT, MapAffinityMatch)
		*b = b.with(h)
		return choice{}, false
	}
	if _, ok := w.s.backend(id); !ok {
		h.Reason = fmt.Sprintf("remembers backend %d, which is gone: a new choice", id)
		*b = b.with(h)
		return choice{}, false
	}
	h.Matched = true
	h.Verdict = fmt.Sprintf("sticky: backend %d", id)
	if w.s.MonoNow != 0 {
		h.Reason = fmt.Sprintf("valid until %d %s (last used %d + %d s), %d %s after the snapshot", until, unit, ent.Value.LastUsed, timeout, until-uint64(uint32(w.s.MonoNow)), unit)
		w.note(fmt.Sprintf("session affinity depends on time: client %s sticks to backend %d while it keeps sending within %d s; a new connection after the entry expires gets a new choice", f.Src, id, timeout))
	} else {
		h.Reason = fmt.Sprintf("last used %d, timeout %d s: whether it still holds depends on when the packet comes (the snapshot's clock is unknown)", ent.Value.LastUsed, timeout)
		w.note("session affinity depends on time, and the snapshot does not record the datapath's clock")
	}
	*b = b.with(h)
	b.affinity = h.Ref()
	return choice{b: *b, id: id, ct: "new"}, true
}

// selectBackend is lb4_select_backend_id: the algorithm (per service or the node default), then a random
// slot or the Maglev table entry.
func (w *walker) selectBackend(b branch, svc ServiceEntry) []choice {
	alg, from := w.cfg.LBDefaultAlg, "lb_default_alg"
	def := w.cfg.LBDefaultAlg
	if w.chain == chainContainer && alg != AlgRandom {
		// lb_default_algorithm(): bpf_lxc (IS_BPF_LXC) always defaults to random; the node-wide Maglev
		// default has no tables for unannotated ClusterIPs.
		w.note("bpf_lxc's default selection is random whatever the node's lb_default_alg (lb_default_algorithm: Maglev tables exist for external frontends only)")
		alg, def, from = AlgRandom, AlgRandom, "bpf_lxc's lb_default_algorithm()"
	}
	if w.cfg.LBSelectionPerService {
		alg, from = svc.Value.LBAlg(), "the frontend's algorithm (lb_selection_per_service)"
	}
	if alg&AlgCustom != 0 {
		w.note(fmt.Sprintf("%s selects a custom algorithm (%#x), which bpf_host does not implement: backend id 0", from, alg))
		return []choice{{b: b, id: 0, ct: "new"}}
	}
	switch alg {
	case AlgMaglev, AlgRandom, AlgFirst:
	default:
		alg, from = def, from+" (the frontend names no algorithm)"
	}
	switch alg {
	case AlgRandom:
		return w.random(b, svc)
	case AlgMaglev:
		return w.maglev(b, svc)
	case AlgFirst:
		return w.slots(b, svc, []uint16{1}, "lb4_select_backend_id_first → lb4_lookup_backend_slot", "the test-only \"first\" algorithm: slot 1")
	}
	w.note(fmt.Sprintf("%s is %d, no algorithm: backend id 0", from, alg))
	return []choice{{b: b, id: 0, ct: "new"}}
}

// random is lb4_select_backend_id_random: slot (get_prandom_u32() % count) + 1, one path per slot.
// (The modulo of a 32-bit random number favours low slots by less than count/2^32; 1/count is exact enough
// for every float64 this model prints.)
func (w *walker) random(b branch, svc ServiceEntry) []choice {
	n := int(svc.Value.Count)
	slots := make([]uint16, n)
	for i := range slots {
		slots[i] = uint16(i + 1)
	}
	return w.slots(b, svc, slots, "lb4_select_backend_id_random → lb4_lookup_backend_slot", fmt.Sprintf("random: slot = get_prandom_u32() %% %d + 1", n))
}

// slots looks each slot up (fn: the datapath's function that does), each with an equal share of the branch.
func (w *walker) slots(b branch, svc ServiceEntry, slots []uint16, fn, why string) []choice {
	var out []choice
	p := 1 / float64(len(slots))
	for _, slot := range slots {
		k := svc.Key
		k.Slot = slot
		raw, _ := k.MarshalBinary()
		h := w.hop(MapServices, fn, fmt.Sprintf("lookup backend slot %d of %s (key %s)", slot, frontendString(k), Hex(raw)))
		h.Reason = fmt.Sprintf("%s: slot %d", why, slot)
		if len(slots) > 1 {
			h.Probability = p
			h.Reason += fmt.Sprintf(" with probability 1/%d", len(slots))
		}
		id := uint32(0)
		if e, ok := w.s.service(k); ok {
			h.Matched, id = true, e.Value.BackendID
			h.Verdict = fmt.Sprintf("backend %d", id)
			h.Text += " value " + e.Raw.Value.String()
		} else {
			h.Reason += "; the slot is missing: backend id 0"
		}
		nb := b.with(h)
		nb.prob *= p
		out = append(out, choice{b: nb, id: id, ct: "new"})
	}
	return out
}

// maglev is lb4_select_backend_id_maglev: LUT[hash % size] of the service's table.
func (w *walker) maglev(b branch, svc ServiceEntry) []choice {
	f := w.flow
	key := MaglevKey{ID: svc.Value.RevNAT}
	raw, _ := key.MarshalBinary()
	h := w.hop(MapMaglev, "lb4_select_backend_id_maglev", fmt.Sprintf("lookup Maglev table of rev-NAT %d (key %s)", svc.Value.RevNAT, Hex(raw)))
	m, ok := w.s.maglev(svc.Value.RevNAT)
	if !ok || len(m.LUT) < 4 {
		h.Reason = "no table for the service: backend id 0"
		return []choice{{b: b.with(h), id: 0, ct: "new"}}
	}
	lut := m.Backends(w.s.byteOrder())
	size := uint32(len(lut))
	h.Matched = true
	affinity := svc.Value.ServiceFlags()&FlagSessionAffinity != 0
	if f.Sport != 0 || affinity {
		sport := f.Sport
		if affinity {
			sport = 0 // the C hashes without the source port for affinity services
		}
		hash := MaglevHash(w.s.byteOrder(), f.Src, sport, f.Dport, w.proto, w.cfg.HashInit4Seed)
		idx := hash % size
		id := lut[idx]
		h.Reason = fmt.Sprintf("jhash_3words(saddr %s, dport %d << 16 | sport %d, nexthdr %d, hash_init4_seed %#x) = %#08x; %% %d = %d",
			f.Src, f.Dport, sport, w.proto, w.cfg.HashInit4Seed, hash, size, idx)
		if affinity {
			h.Reason += " (sport 0: the Service has session affinity)"
		}
		h.Verdict = fmt.Sprintf("LUT[%d] = backend %d", idx, id)
		if !w.cfgKnown {
			w.note("the Maglev hash seed (hash_init4_seed) was not read from the program: the chosen backend assumes seed 0")
		}
		return []choice{{b: b.with(h), id: id, ct: "new"}}
	}
	// Without the source port every backend is possible: each with its share of the table.
	share := map[uint32]int{}
	for _, id := range lut {
		share[id]++
	}
	ids := make([]uint32, 0, len(share))
	for id := range share {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	w.note("Maglev picks one backend per source port: give the source port for the exact backend (each path's probability is its share of the Maglev table)")
	var out []choice
	for _, id := range ids {
		hh := h
		p := float64(share[id]) / float64(size)
		hh.Probability = p
		hh.Choice = trace.ChoiceMaglev
		hh.Reason = fmt.Sprintf("the source port is unknown: backend %d holds %d of the %d table entries", id, share[id], size)
		hh.Verdict = fmt.Sprintf("backend %d", id)
		nb := b.with(hh)
		nb.prob *= p
		out = append(out, choice{b: nb, id: id, ct: "new"})
	}
	return out
}

// lookupBackend is the backends-map lookup of a chosen backend id (fn: the function that makes it): the hop,
// matched with the value when the backend exists, the backend, and where it sends the packet (its port, or the
// frontend's when the backend has none).
func (w *walker) lookupBackend(id uint32, fn string) (trace.Hop, BackendEntry, netip.AddrPort, bool) {
	kraw, _ := BackendKey{ID: id}.MarshalBinary()
	h := w.hop(MapBackends, fn, fmt.Sprintf("lookup backend %d (key %s)", id, Hex(kraw)))
	be, ok := w.s.backend(id)
	if !ok {
		return h, be, netip.AddrPort{}, false
	}
	port := w.flow.Dport
	if be.Value.Port != 0 {
		port = be.Value.Port
	}
	h.Matched = true
	h.Text += " value " + be.Raw.Value.String()
	return h, be, netip.AddrPortFrom(be.Value.Address, port), true
}

// backend looks the chosen backend up, DNATs, and follows nodeport_svc_lb4 to the packet's way out.
func (w *walker) backend(c choice, svc ServiceEntry, tuple CTTuple) {
	f := w.flow
	flags := svc.Value.ServiceFlags()
	h, be, dst, ok := w.lookupBackend(c.id, "lb4_lookup_backend → lb4_dnat_request")
	if !ok {
		h.Reason = fmt.Sprintf("no backend %d", c.id)
		w.noService(c.b.with(h), svc, fmt.Sprintf("backend %d not found", c.id))
		return
	}
	port := dst.Port()
	h.Verdict = "dnat to " + dst.String()
	h.Changes = []string{fmt.Sprintf("daddr %s -> %s", f.Dst, be.Value.Address), fmt.Sprintf("dport %d -> %d", f.Dport, port)}
	if c.ct != "" {
		h.Changes = append(h.Changes, fmt.Sprintf("%s: CT_SERVICE %s-> backend %d (%s)", w.ctMap, tuple, c.id, c.ct))
	}
	if flags&FlagSessionAffinity != 0 {
		h.Changes = append(h.Changes, fmt.Sprintf("%s: client %s, rev-NAT %d -> backend %d, last used now", MapAffinity, f.Src, svc.Value.RevNAT, c.id))
	}
	b := c.b.with(h)
	if w.chain == chainContainer {
		w.containerDelivery(b, svc, dst)
		return
	}

	// backend_local = __lookup_ip4_endpoint(backend->address)
	ekey, _ := EndpointKey{Address: be.Value.Address, Family: EndpointIPv4}.MarshalBinary()
	eh := w.hop(MapEndpoints, "__lookup_ip4_endpoint", fmt.Sprintf("lookup endpoint %s: is the backend on this node? (key %s)", be.Value.Address, Hex(ekey)))
	ep, local := w.s.endpoint(be.Value.Address)
	if local {
		eh.Matched = true
		eh.Verdict = fmt.Sprintf("local endpoint, ifindex %d", ep.Value.Ifindex)
	} else {
		eh.Reason = "not a local endpoint: the backend is on another node"
		if slices.Contains(w.s.Missing, MapEndpoints) {
			eh.Reason += fmt.Sprintf(" (%s is not pinned: no endpoint is local)", MapEndpoints)
		}
	}
	b = b.with(eh)
	if !local && flags&FlagHostPort != 0 {
		w.drop(b, "DROP_INVALID")
		return
	}
	if local && flags&FlagLoopback != 0 && flags&FlagHostPort == 0 {
		w.pass(b, "an L7-delegate Service with a local backend: punted to the local proxy before any DNAT")
		return
	}
	dsr := flags&FlagFwdModeDSR != 0
	if local || !dsr {
		b = b.with(w.nodePortCT(svc, be.Value.Address, port))
	}
	p := trace.Path{Endpoint: w.endpoint(dst)}
	switch {
	case local:
		p.SNAT = f.Src.String()
		p.Egress = fmt.Sprintf("the stack, to the local endpoint (ifindex %d)", ep.Value.Ifindex)
		p.Reply = w.reply(svc, dst, netip.AddrPortFrom(f.Src, f.Sport), false)
	case dsr:
		p.SNAT = f.Src.String()
		p.Egress = "to the backend's node with the DSR information (tail call CILIUM_CALL_IPV4_NODEPORT_DSR)"
		w.note("the Service forwards with DSR: the backend sees the client's address and answers it directly, as the frontend")
		p.Reply = w.reply(svc, dst, netip.AddrPortFrom(f.Src, f.Sport), true)
	case w.s.NodeConfig != nil && w.s.NodeConfig.TunnelMode:
		// Measured on a kind node with the chart's default VXLAN routing: the backend saw the NodePort node's
		// cilium_host address, and the packet crossed the overlay; this walk models native routing only.
		p.SNAT = trace.Unknown
		p.Egress = "the overlay (cilium_vxlan or cilium_geneve) to the backend's node: not modelled"
		w.note(fmt.Sprintf("Cilium routes pods through a tunnel on this node (TUNNEL_MODE in %s): for a backend on another node, the source it sees and the way there are not modelled (the walk models native routing)", w.s.NodeConfig.Path))
	default:
		sh, nat := w.snat(be.Value.Address)
		b = b.with(sh)
		p.SNAT = nat.Addr().String()
		p.Egress = fmt.Sprintf("fib_redirect: out of the interface and to the next hop the FIB gives for %s", be.Value.Address)
		p.Reply = w.reply(svc, dst, nat, false)
	}
	w.finish(b, trace.Delivered, nil, p)
}

// nodePortCT is the CT_EGRESS entry nodeport_svc_lb4 creates for the translated flow (SCOPE_FORWARD on the
// reversed tuple: from the backend back to the client, TUPLE_F_OUT); replies are reverse-NATed through it.
func (w *walker) nodePortCT(svc ServiceEntry, backend netip.Addr, port uint16) trace.Hop {
	f := w.flow
	t := CTTuple{Daddr: f.Src, Saddr: backend, Dport: port, Sport: f.Sport, Nexthdr: w.proto, Flags: TupleOut}
	raw, _ := t.MarshalBinary()
	h := w.hop(w.ctMap, "ct_lazy_lookup4, ct_create4", fmt.Sprintf("lookup CT_EGRESS (NodePort) %s(key %s: the DNATed tuple reversed)", t, Hex(raw)))
	if f.Sport == 0 {
		h.Reason = "the source port is unknown: the entry of a new flow is created"
	} else if row, ok := w.s.ct(w.ctMap, t); ok && row.Value.Flags&CTNodePort != 0 && row.Value.RevNAT != 0 && row.Value.RevNAT == svc.Value.RevNAT {
		h.Matched = true
		h.Verdict = "existing NodePort entry"
		h.Text += " value " + row.Raw.Value.String()
		return h
	} else {
		h.Reason = "no entry: created"
	}
	h.Changes = []string{fmt.Sprintf("%s: CT_EGRESS %s-> node_port, rev-NAT %d (new)", w.ctMap, t, svc.Value.RevNAT)}
	return h
}

// snat is tail_nodeport_nat_egress_ipv4: the source becomes IPV4_DIRECT_ROUTING (or the FIB's source when
// enable_nodeport_source_lookup is set); the port is kept when it lies in [nodeport_port_max+1, 65535], else a
// random port of that range.
func (w *walker) snat(backend netip.Addr) (trace.Hop, netip.AddrPort) {
	f := w.flow
	nodeIP, from := w.nodeIP()
	h := w.hop("cilium_snat_v4_external", "tail_nodeport_nat_egress_ipv4", "tail call CILIUM_CALL_IPV4_NODEPORT_NAT_EGRESS: SNAT the request to the node's address")
	h.Matched = true
	h.Verdict = "masquerade to " + nodeIP.String()
	how := "IPV4_DIRECT_ROUTING, compiled into bpf_host"
	if w.cfg.EnableNodePortSourceLookup {
		how = fmt.Sprintf("the FIB's source address for %s (enable_nodeport_source_lookup)", backend)
	}
	h.Reason = fmt.Sprintf("the source is %s: %s", how, from)
	lo := uint32(w.cfg.NodePortMax) + 1
	h.Changes = []string{fmt.Sprintf("saddr %s -> %s", f.Src, nodeIP)}
	natPort := uint16(0)
	switch {
	case f.Sport == 0:
		h.Changes = append(h.Changes, fmt.Sprintf("sport kept when in %d-65535, else a random port of that range", lo))
	case uint32(f.Sport) >= lo:
		natPort = f.Sport
		h.Changes = append(h.Changes, fmt.Sprintf("sport %d kept (in %d-65535, if no other flow holds it)", f.Sport, lo))
	default:
		h.Changes = append(h.Changes, fmt.Sprintf("sport %d -> a random port in %d-65535", f.Sport, lo))
	}
	h.Changes = append(h.Changes, "cilium_snat_v4_external: the mapping and its reverse (new)")
	return h, netip.AddrPortFrom(nodeIP, natPort)
}

// nodeIP is the address NodePort SNAT uses: the compiled-in IPV4_DIRECT_ROUTING cannot be read back from the
// program, so the walk shows the ingress interface's address, which is what the agent compiles in.
func (w *walker) nodeIP() (netip.Addr, string) {
	if w.prog != nil {
		for _, a := range w.prog.Addrs {
			if a.Addr() == w.flow.Dst {
				return a.Addr(), fmt.Sprintf("%s's address %s", w.prog.Interface, a.Addr())
			}
		}
		if len(w.prog.Addrs) > 0 {
			a := w.prog.Addrs[0].Addr()
			return a, fmt.Sprintf("%s's address %s", w.prog.Interface, a)
		}
	}
	w.note("the node's address (IPV4_DIRECT_ROUTING) is compiled into bpf_host and no interface address was read: the walk assumes the packet's destination")
	return w.flow.Dst, "assumed to be the destination address"
}

func (w *walker) endpoint(dst netip.AddrPort) *trace.Endpoint {
	e := &trace.Endpoint{IP: dst.Addr().String(), Port: int(dst.Port())}
	if w.names != nil {
		e.Pod, e.Node = w.names(dst.Addr())
	}
	return e
}

// reply is the way back: the backend answers to (SNAT address or client), the NodePort conntrack entry's
// rev_nat_index selects cilium_lb4_reverse_nat[rev_nat_index], which rewrites the source back to the frontend.
func (w *walker) reply(svc ServiceEntry, backend, to netip.AddrPort, dsr bool) *trace.Reply {
	f := w.flow
	port := func(p uint16, unknown string) string {
		if p == 0 {
			return unknown
		}
		return fmt.Sprint(p)
	}
	r := &trace.Reply{
		From:       backend.String(),
		To:         fmt.Sprintf("%s:%s", to.Addr(), port(to.Port(), "PORT'")),
		AsSeenFrom: netip.AddrPortFrom(f.Dst, f.Dport).String(),
		AsSeenTo:   fmt.Sprintf("%s:%s", f.Src, port(f.Sport, "PORT")),
	}
	if to.Addr() == f.Src {
		r.To = r.AsSeenTo
	}
	rv, ok := w.s.revNAT(svc.Value.RevNAT)
	if !ok {
		r.AsSeenFrom = backend.String()
		w.note(fmt.Sprintf("%s has no entry %d: replies would keep the backend's address", MapRevNAT, svc.Value.RevNAT))
		r.Text = fmt.Sprintf("the reply %s -> %s finds no %s[%d]: it reaches the client from the backend's address", r.From, r.To, MapRevNAT, svc.Value.RevNAT)
		return r
	}
	r.AsSeenFrom = netip.AddrPortFrom(rv.Value.Address, rv.Value.Port).String()
	revnat := fmt.Sprintf("%s[%d] = %s", MapRevNAT, svc.Value.RevNAT, r.AsSeenFrom)
	r.UndoneBy = []string{fmt.Sprintf("%s[%d]", MapRevNAT, svc.Value.RevNAT)}
	switch {
	case dsr:
		r.Text = fmt.Sprintf("with DSR the backend's node answers the client directly, rewriting the source with %s", revnat)
	case to.Addr() != f.Src:
		r.UndoneBy = append([]string{"cilium_snat_v4_external"}, r.UndoneBy...)
		r.Text = fmt.Sprintf("the reply %s -> %s comes back through cil_from_netdev: no frontend matches, the NodePort NAT ingress tail call reverses the SNAT with cilium_snat_v4_external (destination back to %s), and the NodePort conntrack entry's rev-NAT index selects %s, which rewrites the source", r.From, r.To, r.AsSeenTo, revnat)
	default:
		r.Text = fmt.Sprintf("the reply %s -> %s matches the NodePort conntrack entry, whose rev-NAT index selects %s, which rewrites the source", r.From, r.To, revnat)
	}
	return r
}

// noService is what nodeport_svc_lb4 does when lb4_local returns DROP_NO_SERVICE.
func (w *walker) noService(b branch, svc ServiceEntry, why string) {
	flags := svc.Value.ServiceFlags()
	last := &b.hops[len(b.hops)-1]
	if !w.cfg.EnableNoServiceEndpointsRoutable {
		// handle_nonroutable_endpoints_v4: drop for eTP=Local (external) / iTP=Local (internal) frontends,
		// else let the packet continue to the stack.
		if flags.External() && flags&FlagExtLocalScope != 0 || !flags.External() && flags&FlagIntLocalScope != 0 {
			// Its own hop: the drop is this function's, for the traffic policy, not the lookup's before it.
			h := w.hop("", "handle_nonroutable_endpoints_v4", "traffic policy Local, no backend on this node")
			h.Matched = true
			h.Reason = why + "; enable_no_service_endpoints_routable is off and the traffic policy is Local: this node's scope of the frontend holds its own backends only"
			w.drop(b.with(h), "DROP_NO_SERVICE")
			return
		}
		w.pass(b, why+"; enable_no_service_endpoints_routable is off: handle_nonroutable_endpoints_v4 lets it continue to the stack")
		return
	}
	known := w.prog != nil && len(w.prog.TailCalls) > 0
	if known && !slices.Contains(w.prog.TailCalls, callNoService) {
		h := w.hop("", "nodeport_svc_lb4", "no backend, and no reply to send")
		h.Matched = true
		h.Reason = why + "; bpf_host was built without SERVICE_NO_BACKEND_RESPONSE, so DROP_NO_SERVICE from lb4_local drops the packet"
		w.drop(b.with(h), "DROP_NO_SERVICE")
		return
	}
	addReason(last, why)
	// Its own hop, so that a reader sees the reply's program and what it sends, not only the lookup before it.
	h := w.hop(MapCalls, "tail_no_service_ipv4", fmt.Sprintf("tail call CILIUM_CALL_IPV4_NO_SERVICE (%d)", callNoService))
	h.Matched = true
	h.Reason = "DROP_NO_SERVICE from lb4_local: generate_icmp4_reply turns the packet into an ICMP port unreachable to its source (quoting the SYN's IP header and first 8 bytes) and redirect_self sends it back out the interface it came in on"
	if !known {
		h.Reason += "; assumed: the agent's default --service-no-backend-response=reject (the program's tail calls were not read)"
	}
	h.Verdict = "reject (ICMP port unreachable)"
	w.note("the ICMP reply is written over the SYN itself: a client on the node's own Linux host (kind's Docker host, another kind node) sent the SYN with its checksum offload pending, and discards the reply, so it times out instead of being refused; across a real NIC it is refused at once (measured on kind)")
	b = b.with(h)
	w.finish(b, trace.Rejected, &b.hops[len(b.hops)-1], trace.Path{})
}
