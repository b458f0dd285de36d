package ebpf

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// Walk follows the first packet of a flow that arrives on the node's interface through bpf_host's
// cil_from_netdev, as Cilium v1.20.2's C does it for IPv4 (handle_ipv4 → nodeport_lb4 → nodeport_svc_lb4 →
// lb4_local), map lookup by map lookup: the frontend lookup (slot 0), the service conntrack entry, session
// affinity, the backend slot (random: one path per slot with probability 1/count; Maglev: the exact LUT entry
// for the flow's hash), the backend, the DNAT, the NodePort SNAT, and the reverse NAT of the reply. names
// resolves an address to its pod and node (may be nil).
func Walk(s *State, flow trace.Flow, names func(netip.Addr) (pod, node string)) (paths []trace.Path, notes []string, ct *trace.Conntrack) {
	return WalkFrom(s, flow, "", names)
}

// WalkFrom is Walk for a packet arriving on the interface iif (the program attached there handles it); ""
// picks the interface that holds the destination, as for a NodePort. A packet whose source is one of the
// node's pod endpoints (cilium_lxc) is the pod's: bpf_lxc's cil_from_container takes it on the pod's veth.
func WalkFrom(s *State, flow trace.Flow, iif string, names func(netip.Addr) (pod, node string)) (paths []trace.Path, notes []string, ct *trace.Conntrack) {
	if ep, ok := s.endpoint(flow.Src); ok && ep.Value.Flags&EndpointFlagHost == 0 && flow.Src.Is4() {
		if s.socketLBForPods() && (flow.Proto == "tcp" || flow.Proto == "udp") {
			return walkSock(s, flow, &ep, names)
		}
		w := newContainerWalker(s, flow, ep, names)
		w.runContainer()
		return w.paths, w.notes, w.ct
	}
	w := newWalker(s, flow, iif, names)
	w.run()
	return w.paths, w.notes, w.ct
}

// walker holds one walk. Hops are appended to the current branch; branches fork where the datapath chooses.
type walker struct {
	s     *State
	flow  trace.Flow
	names func(netip.Addr) (pod, node string)
	prog  *Program
	cfg   Config
	// cfgKnown is false when no attached program was found: the walk then assumes Cilium's defaults.
	cfgKnown bool
	hook     string
	// chain is the program the walk is in: cil_from_netdev (bpf_host) or cil_from_container (bpf_lxc).
	chain string
	// sender is the sending pod's endpoint when the walk is bpf_lxc's.
	sender *EndpointEntry
	proto  uint8
	ctMap  string

	paths []trace.Path
	notes []string
	ct    *trace.Conntrack
}

// branch is a partial path: the hops so far and the chance of reaching them.
type branch struct {
	hops []trace.Hop
	prob float64
	// affinity is the Ref of the hop where cilium_lb4_affinity held the client's backend ("" for none);
	// localOnly, of the frontend whose external scope holds this node's backends only (eTP Local).
	affinity, localOnly string
}

func (b branch) with(h ...trace.Hop) branch {
	return branch{hops: append(slices.Clone(b.hops), h...), prob: b.prob, affinity: b.affinity, localOnly: b.localOnly}
}

const (
	chainNetdev    = "cil_from_netdev"
	chainContainer = "cil_from_container"
)

func newWalker(s *State, flow trace.Flow, iif string, names func(netip.Addr) (string, string)) *walker {
	w := &walker{s: s, flow: flow, names: names, chain: chainNetdev}
	w.prog = w.ingressProgram(iif)
	w.hook = "tcx ingress"
	if w.prog != nil {
		w.hook = w.prog.Hook()
		if c := s.config(w.prog.ConfigMap); c != nil {
			w.cfg, w.cfgKnown = *c, true
		}
	}
	if !w.cfgKnown {
		// Cilium's defaults: ASSIGN_CONFIG(lb_default_alg, LB_SELECTION_RANDOM), the NodePort range, and the
		// agent's --enable-no-service-endpoints-routable=true. The hash seed is per cluster: unknown.
		w.cfg = Config{LBDefaultAlg: AlgRandom, NodePortMin: 30000, NodePortMax: 32767, EnableNoServiceEndpointsRoutable: true}
		w.note("no load-time configuration of cil_from_netdev was read: the walk assumes Cilium's defaults (random selection, NodePorts 30000-32767, Services without backends reject)")
	}
	return w
}

// ingressProgram is the cil_from_netdev the flow arrives through: the one on the interface that holds the
// destination address, else the only one.
func (w *walker) ingressProgram(iif string) *Program {
	var cands []*Program
	for i := range w.s.Programs {
		p := &w.s.Programs[i]
		if p.Direction == "ingress" && p.Name == chainNetdev {
			if iif != "" && p.Interface == iif {
				return p
			}
			cands = append(cands, p)
		}
	}
	for _, p := range cands {
		for _, a := range p.Addrs {
			if a.Addr() == w.flow.Dst {
				return p
			}
		}
	}
	switch len(cands) {
	case 0:
		w.note("no cil_from_netdev is attached with tcx in the collected namespace: the walk shows what bpf_host would do")
		return nil
	case 1:
		return cands[0]
	}
	w.note(fmt.Sprintf("cil_from_netdev is attached to %d interfaces and none holds %s: the walk assumes it arrives on %s", len(cands), w.flow.Dst, cands[0].Interface))
	return cands[0]
}

func (w *walker) note(n string) {
	if !slices.Contains(w.notes, n) {
		w.notes = append(w.notes, n)
	}
}

// hop is a step of the walk: the map it reads (table), the Cilium function that reads it (fn: what a reader
// of bpf/ greps for), and what it looks up.
func (w *walker) hop(table, fn, text string) trace.Hop {
	return trace.Hop{Hook: w.hook, Table: table, Chain: w.chain, Function: fn, Text: text}
}

// finish ends a branch.
func (w *walker) finish(b branch, verdict string, by *trace.Hop, p trace.Path) {
	stamp(b.hops, b.affinity)
	p.Probability, p.Hops, p.Verdict, p.Affinity, p.LocalOnly = b.prob, b.hops, verdict, b.affinity, b.localOnly
	if by != nil {
		h := *by
		p.VerdictBy = &h
	}
	w.paths = append(w.paths, p)
}

// drop ends a branch with the datapath's drop reason on its last hop. What dropped it is the program, for the
// reason it reports (the drop notification's, as `cilium-dbg monitor --type drop` prints it), not the map its
// last lookup read.
func (w *walker) drop(b branch, reason string) {
	last := &b.hops[len(b.hops)-1]
	last.Verdict = "drop (" + reason + ")"
	by := trace.Hop{Hook: last.Hook, Chain: w.chain, Function: last.Function, Matched: true, Verdict: last.Verdict,
		Text: fmt.Sprintf("%s (%s) after %s", reason, dropReasons[reason], cmp.Or(last.Function, last.Table))}
	w.finish(b, trace.Dropped, &by, trace.Path{})
}

// dropReasons are the datapath's drop reasons this walk ends in, in Cilium's words (pkg/monitor/api's
// errors table).
var dropReasons = map[string]string{
	"DROP_NO_SERVICE":       "Service backend not found",
	"DROP_NOT_IN_SRC_RANGE": "Denied by LB src range check",
	"DROP_IS_CLUSTER_IP":    "Is a ClusterIP",
	"DROP_INVALID":          "Invalid packet",
}

// pass ends a branch where cil_from_netdev lets the packet continue to the kernel's stack untranslated.
func (w *walker) pass(b branch, why string) {
	last := &b.hops[len(b.hops)-1]
	last.Verdict = "pass to the stack"
	addReason(last, why)
	if !w.s.isNodeAddress(w.flow.Dst) {
		// Not the node's: the stack routes it on as it is (a ClusterIP on a port its Service lacks leaves by
		// the default route, where nothing owns it).
		w.finish(b, trace.Delivered, nil, trace.Path{Egress: "the node's routing"})
		return
	}
	w.finish(b, trace.Local, nil, trace.Path{})
}

// addReason appends to a hop's reason.
func addReason(h *trace.Hop, why string) {
	if h.Reason == "" {
		h.Reason = why
	} else {
		h.Reason += "; " + why
	}
}

func (w *walker) run() {
	f := w.flow
	start := branch{prob: 1}
	if !f.Src.Is4() || !f.Dst.Is4() {
		h := w.hop(MapServices, "", fmt.Sprintf("%s -> %s: not IPv4", f.Src, f.Dst))
		w.note("the ebpf walk covers IPv4 (bpf_host's IPv6 path is not traced)")
		w.pass(start.with(h), "only the IPv4 NodePort path is traced")
		return
	}
	// lb4_extract_tuple: ICMP skips the service lookup, other protocols are DROP_UNKNOWN_L4, which
	// nodeport_lb4 turns into "no service" and passes on.
	if !w.l4(start, "lb4_extract_tuple finds no service ports", "not TCP or UDP: no service lookup") {
		return
	}
	w.service(start)
}

// l4 sets the walk's protocol and conntrack map for TCP and UDP, the protocols Cilium's load balancers know;
// any other ends the walk, the packet passed on untranslated (why: the program's reason, then).
func (w *walker) l4(start branch, why, then string) bool {
	switch strings.ToLower(w.flow.Proto) {
	case "tcp":
		w.proto, w.ctMap = 6, MapCT
	case "udp":
		w.proto, w.ctMap = 17, MapCTAny
	default:
		h := w.hop(MapServices, "lb4_extract_tuple", fmt.Sprintf("protocol %q: %s", w.flow.Proto, why))
		w.pass(start.with(h), then)
		return false
	}
	return true
}

// service is lb4_lookup_service(&key, east_west=false) from nodeport_lb4, then nodeport_svc_lb4's checks.
func (w *walker) service(b branch) {
	f := w.flow
	key := ServiceKey{Address: f.Dst, Port: f.Dport, Proto: w.proto, Scope: ScopeExternal}
	raw, _ := key.MarshalBinary()
	h := w.hop(MapServices, "nodeport_lb4 → lb4_lookup_service", fmt.Sprintf("lookup frontend %s slot 0, external scope (key %s)", frontendString(key), Hex(raw)))
	svc, ok := w.s.service(key)
	if !ok {
		h.Reason = w.whyNoFrontend(key)
		b = b.with(h)
		// The wildcard: same address, port 0, protocol ANY. It exists for addresses that are frontends, so
		// that a packet to an unserved port is dropped rather than passed on (and maybe looped back to us).
		wk := ServiceKey{Address: f.Dst}
		wraw, _ := wk.MarshalBinary()
		wh := w.hop(MapServices, "lb4_lookup_service (wildcard)", fmt.Sprintf("lookup wildcard %s:0/ANY slot 0 (key %s)", f.Dst, Hex(wraw)))
		if _, ok := w.s.service(wk); ok {
			wh.Matched = true
			wh.Reason = fmt.Sprintf("%s is a frontend address, but no Service has port %d/%s on it", f.Dst, f.Dport, strings.ToUpper(f.Proto))
			w.drop(b.with(wh), "DROP_NO_SERVICE")
			return
		}
		wh.Reason = "no wildcard entry: the address is not a frontend"
		w.pass(b.with(wh), "not for a Service: cil_from_netdev only checks whether it is a reply to reverse-SNAT (cilium_snat_v4_external) and lets it continue")
		return
	}
	flags := svc.Value.ServiceFlags()
	h.Matched = true
	h.Verdict = fmt.Sprintf("frontend: count %d, rev-NAT %d, [%s]", svc.Value.Count, svc.Value.RevNAT, flags)
	if svc.Value.QCount > 0 {
		h.Verdict += fmt.Sprintf(", %d quarantined slots", svc.Value.QCount)
	}
	h.Text += " value " + svc.Raw.Value.String()
	b = b.with(h)
	if flags&FlagExtLocalScope != 0 {
		// The agent writes only this node's backends into a Local frontend's external scope.
		b.localOnly = h.Ref()
	}

	if flags&FlagSourceRange != 0 {
		sh, ok := w.sourceRange(svc)
		b = b.with(sh)
		if !ok {
			w.drop(b, "DROP_NOT_IN_SRC_RANGE")
			return
		}
	}
	if flags&FlagRoutable == 0 {
		last := &b.hops[len(b.hops)-1]
		last.Reason = "the frontend is non-routable (a ClusterIP, or bpf.lbExternalClusterIP is off): not reachable from outside the node"
		w.drop(b, "DROP_IS_CLUSTER_IP")
		return
	}
	if flags&FlagL7LoadBalancer != 0 && svc.Value.L7ProxyPort() > 0 {
		w.note(fmt.Sprintf("%s is an L7 load-balancer frontend: a bpf_host built with ENABLE_L7_LB (Cilium with Envoy) hands the packet to the proxy on port %d instead; the walk follows a build without it", frontendString(key), svc.Value.L7ProxyPort()))
	}
	if flags&FlagNat46x64 != 0 {
		w.note(fmt.Sprintf("%s is a NAT46/64 frontend: bpf_host translates it to IPv6 when built with ENABLE_NAT_46X64, which the walk does not follow", frontendString(key)))
	}
	w.local(b, svc)
}

// whyNoFrontend explains a missed frontend lookup with the entries that nearly match.
func (w *walker) whyNoFrontend(key ServiceKey) string {
	var near []string
	for _, e := range w.s.Services {
		k := e.Key
		if k.Slot != 0 {
			continue
		}
		switch {
		case k.Address == key.Address && k.Port == key.Port && k.Proto != key.Proto && k.Proto != 0:
			near = append(near, fmt.Sprintf("%s exists for %s only (the datapath keys frontends by protocol)", frontendString(k), ProtoName(k.Proto)))
		case k.Address == key.Address && k.Port == key.Port && k.Proto == key.Proto && k.Scope != ScopeExternal:
			near = append(near, fmt.Sprintf("%s exists in the internal scope only", frontendString(k)))
		case k.Address.IsUnspecified() && k.Port == key.Port && k.Proto == key.Proto:
			near = append(near, fmt.Sprintf("%s (the non-routable surrogate of a NodePort) exists, but from-netdev never looks up 0.0.0.0: only pods (bpf_lxc's wildcard lookup) and the socket LB use it; a NodePort is served on the node addresses the agent listed", frontendString(k)))
		}
	}
	msg := fmt.Sprintf("no frontend %s", frontendString(key))
	if len(near) > 0 {
		msg += ": " + strings.Join(near, "; ")
	}
	return msg
}

// sourceRange is lb4_src_range_ok: an LPM lookup of {rev_nat_id, saddr} in cilium_lb4_source_range, inverted
// when the frontend's flags2 has SVC_FLAG_SOURCE_RANGE_DENY.
func (w *walker) sourceRange(svc ServiceEntry) (trace.Hop, bool) {
	h := w.hop(MapSourceRange, "lb4_src_range_ok", fmt.Sprintf("lookup %s in the source ranges of rev-NAT %d", w.flow.Src, svc.Value.RevNAT))
	var hit *SourceRangeEntry
	for i, e := range w.s.SourceRanges {
		if e.Key.RevNAT == svc.Value.RevNAT && e.Key.Prefix.Contains(w.flow.Src) &&
			(hit == nil || e.Key.Prefix.Bits() > hit.Key.Prefix.Bits()) {
			hit = &w.s.SourceRanges[i]
		}
	}
	deny := svc.Value.ServiceFlags()&FlagSourceRangeDeny != 0
	ok := (hit != nil) != deny
	h.Matched = hit != nil
	switch {
	case hit != nil && !deny:
		h.Reason = fmt.Sprintf("%s is in allowed range %s", w.flow.Src, hit.Key.Prefix)
	case hit != nil:
		h.Reason = fmt.Sprintf("%s is in denied range %s", w.flow.Src, hit.Key.Prefix)
	case deny:
		h.Reason = fmt.Sprintf("%s is in no denied range", w.flow.Src)
	default:
		h.Reason = fmt.Sprintf("%s is in no allowed range (loadBalancerSourceRanges)", w.flow.Src)
	}
	return h, ok
}

// choice is one backend the datapath can pick, with the hops that picked it.
type choice struct {
	b  branch
	id uint32
	// ct is what happens to the CT_SERVICE entry: "new" (ct_create4), "updated" (ct_update_svc_entry), or ""
	// (the established entry decided).
	ct string
}

// local is lb4_local: the service conntrack entry, then (for a new flow) affinity and backend selection.
func (w *walker) local(b branch, svc ServiceEntry) {
	f := w.flow
	// lb4_extract_tuple keeps the CT convention: addresses as in the packet, ports swapped (dport = the
	// packet's source port). ct_lazy_lookup4(CT_SERVICE, SCOPE_REVERSE) looks this tuple up as it is, with
	// flags TUPLE_F_SERVICE, and accepts an entry of the same service only (CT_ENTRY_SVC: same rev_nat_index).
	tuple := CTTuple{Daddr: f.Dst, Saddr: f.Src, Dport: f.Sport, Sport: f.Dport, Nexthdr: w.proto, Flags: TupleService}
	raw, _ := tuple.MarshalBinary()
	h := w.hop(w.ctMap, "lb4_local → ct_lazy_lookup4", fmt.Sprintf("lookup CT_SERVICE %s(key %s: daddr frontend, saddr client, dport = client port, sport = frontend port)", tuple, Hex(raw)))
	syn := w.proto == 6 // the traced packet is a flow's first: a SYN for TCP
	if f.Sport == 0 {
		var ports []string
		for _, e := range w.s.CT {
			k := e.Key
			if e.Map == w.ctMap && k.Flags == TupleService && k.Daddr == tuple.Daddr && k.Saddr == tuple.Saddr &&
				k.Sport == tuple.Sport && k.Nexthdr == tuple.Nexthdr && e.Value.RevNAT == svc.Value.RevNAT {
				ports = append(ports, fmt.Sprintf("%d (backend %d)", k.Dport, e.Value.BackendID))
			}
		}
		h.Reason = "the source port is unknown: no exact lookup; a new flow is assumed"
		if len(ports) > 0 {
			h.Reason += fmt.Sprintf("; existing flows from %s ports %s keep their backends", f.Src, strings.Join(ports, ", "))
			w.note(fmt.Sprintf("%d established flow(s) from %s to this frontend keep the backend in their conntrack entry; give the source port to trace one", len(ports), f.Src))
		}
		w.newFlow(b.with(h), svc, tuple)
		return
	}
	row, ok := w.s.ct(w.ctMap, tuple)
	switch {
	case !ok:
		h.Reason = "no entry: a new flow (CT_NEW)"
	case row.Value.RevNAT != svc.Value.RevNAT:
		h.Reason = fmt.Sprintf("the entry belongs to rev-NAT %d, not %d (CT_ENTRY_SVC needs the same service): CT_NEW", row.Value.RevNAT, svc.Value.RevNAT)
	case syn && row.Value.Closing():
		h.Reason = "the entry is closing and a SYN reopens the connection: CT_NEW, a new backend is chosen"
	default:
		h.Matched = true
		h.Text += " value " + row.Raw.Value.String()
		h.Verdict = fmt.Sprintf("established flow: backend %d", row.Value.BackendID)
		w.ct = &trace.Conntrack{Entry: strings.TrimSpace(row.String()), Direction: "original"}
		if w.s.MonoNow != 0 && uint64(row.Value.Lifetime) < w.s.MonoNow {
			w.note("the conntrack entry's lifetime has passed, but the datapath does not check it: the entry decides until the agent's garbage collector removes it")
		}
		w.established(b.with(h), svc, tuple, row)
		return
	}
	w.newFlow(b.with(h), svc, tuple)
}

// established is lb4_local's CT_REPLY case: the entry's backend wins unless it is gone, or not active and the
// packet is a SYN.
func (w *walker) established(b branch, svc ServiceEntry, tuple CTTuple, row CTRow) {
	id := uint32(row.Value.BackendID)
	be, ok := w.s.backend(id)
	switch {
	case ok && be.Value.Flags == BackendActive:
		w.backend(choice{b: b, id: id}, svc, tuple)
		return
	case ok && w.proto != 6:
		w.note(fmt.Sprintf("backend %d is %s: the established UDP flow keeps it (only a TCP SYN moves to an active backend)", id, be.Value.StateName()))
		w.backend(choice{b: b, id: id}, svc, tuple)
		return
	}
	h := w.hop(MapBackends, "lb4_lookup_backend", fmt.Sprintf("lookup backend %d of the conntrack entry", id))
	if ok {
		h.Matched = true
		h.Reason = fmt.Sprintf("backend is %s and the packet is a SYN: a new backend is chosen and the entry updated (ct_update_svc_entry)", be.Value.StateName())
	} else {
		h.Reason = "the backend is gone: a new backend is chosen and the entry updated (ct_update_svc_entry)"
	}
	b = b.with(h)
	if svc.Value.Count == 0 {
		w.noService(b, svc, "the Service has no backends (count 0)")
		return
	}
	for _, c := range w.selectBackend(b, svc) {
		c.ct = "updated"
		w.backend(c, svc, tuple)
	}
}

// newFlow is lb4_local's CT_NEW case.
func (w *walker) newFlow(b branch, svc ServiceEntry, tuple CTTuple) {
	if svc.Value.Count == 0 {
		w.noService(b, svc, "the Service has no backends (count 0)")
		return
	}
	if svc.Value.ServiceFlags()&FlagSessionAffinity != 0 {
		if c, ok := w.affinity(&b, svc); ok {
			w.backend(c, svc, tuple)
			return
		}
	}
	for _, c := range w.selectBackend(b, svc) {
		w.backend(c, svc, tuple)
	}
}
