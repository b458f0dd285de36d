// Package tracer answers `k8sguide trace`: it reads a snapshot (or raw rules), picks the engines that are
// present on the node, walks the packet through them and names what it finds.
package tracer

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes"

	"github.com/k8sguide/k8sguide/dataplanes/engines"
	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
	"github.com/k8sguide/k8sguide/dataplanes/netstate"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/paste"
	"github.com/k8sguide/k8sguide/inspect/snapshot"
)

// DefaultClientIP is where outside traffic comes from when the snapshot does not say: the gateway of kind's
// Docker network, which is also the netns lab's client.
const DefaultClientIP = "172.18.0.1"

// Request is one `trace` question.
type Request struct {
	Dst   string // IP:PORT
	Src   string // IP or IP:PORT; "" picks the natural source for From
	Proto string // tcp (default), udp or sctp
	From  string // client (default), node, pod/NAME
	// Sport fixes the source port when Src does not (verification uses a fresh one).
	Sport uint16
	// InIface and OutIface are, for a dump that does not say (no interfaces, no routes), where the packet
	// arrives and where the node sends what is not its own ("": eth0, and the trace says it assumed so).
	InIface, OutIface string
	// Quiet asks for where the packet goes (paths, endpoints, verdict) without the rules that did not match
	// (trace.Flow.Quiet): what deploy's wait needs of thousands of walks.
	Quiet bool
}

// Load reads what `trace --snapshot` accepts: a k8sguide snapshot (either version), or what people paste: one or
// more tools' outputs the engines recognise (see each engine's Sniff: iptables-save whole or a fragment,
// `iptables -S`, `iptables -L [-n] [-v]` listings, `nft list ruleset` or `nft -j list ruleset` output, `ipvsadm
// -L[n]`), with what surrounds them (prompts, command lines, fences, log prefixes) removed by the paste front
// end. Raw dumps say little about the node's addresses: local lists what the node owns (addrtype LOCAL / fib
// daddr type local), to which the dumps add what they show (IPVS virtual servers).
func Load(data []byte, local []netip.Addr) (*snapshot.Snapshot, error) {
	trimmed := bytes.TrimSpace(bytes.TrimPrefix(data, []byte("\ufeff")))
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("the input is empty")
	}
	if trimmed[0] == '{' {
		s, err := snapshot.Parse(trimmed)
		switch {
		case err == nil:
			if len(local) > 0 {
				s.Net = netstate.FromLocalAddresses(local)
			}
			return s, nil
		case errors.Is(err, snapshot.ErrNotSnapshot):
			for _, e := range engines.All {
				sn, ok, err := e.Sniff(string(trimmed))
				if !ok {
					continue
				}
				if err != nil {
					return nil, err
				}
				s := &snapshot.Snapshot{Version: snapshot.Version, Engines: map[dataplanes.Name]json.RawMessage{e.Name(): sn.Part},
					Net: localState(local, sn.Local), Read: []string{"read as: " + strings.Join(sn.ReadAs, ", ")}}
				s.KeepSniffed(e.Name(), sn.Parsed)
				return s, nil
			}
			return nil, fmt.Errorf("JSON input is neither a k8sguide snapshot nor `nft -j list ruleset` output")
		case errors.As(err, new(*json.SyntaxError)), errors.As(err, new(*json.UnmarshalTypeError)):
			return nil, fmt.Errorf("the input looks like JSON but does not parse as a snapshot or nft -j output: %v", err)
		default:
			return nil, err
		}
	}
	return loadText(string(data), local)
}

// loadText is Load of a dump that is not JSON at its start (a pasted tool's output, maybe around JSON), as text:
// LoadFile reads a file into one string, which the paste front end slices and the engines read (the iptables
// engine keeps its rules' text as slices of it), so that a 5,000-Service dump is in memory about once.
func loadText(text string, local []netip.Addr) (*snapshot.Snapshot, error) {
	p := paste.Clean(text)
	if len(p.Outputs) == 1 && strings.HasPrefix(strings.TrimSpace(p.Outputs[0].Text), "{") && len(p.Stripped) > 0 {
		// JSON inside fences or after a command line.
		return Load([]byte(p.Outputs[0].Text), local)
	}
	if len(p.Outputs) == 0 {
		if len(p.Skipped) > 0 {
			return nil, fmt.Errorf("the input holds no dump k8sguide reads, only the output of %s", quoteAll(p.Skipped))
		}
		return nil, fmt.Errorf("the input holds no dump k8sguide reads")
	}
	sniffers := append(slices.DeleteFunc(slices.Clone(engines.All), func(e dataplanes.Engine) bool { return e == engines.Lenient }), engines.Lenient)
	parts := map[dataplanes.Name]dataplanes.Sniffed{} // an engine's part when one output is all it reads
	var order []dataplanes.Engine
	var readAs []string
	var ipsets []netstate.IPSet
	var served []netip.Addr                // addresses the dumps show Services on (IPVS virtual servers)
	raws := map[dataplanes.Name][]string{} // each engine's outputs, as its reader took them
	for i := range p.Outputs {
		o := &p.Outputs[i]
		// ipset's outputs are the node's sets, which rules match against: the network state's, no engine's.
		if sets, how, ok, err := readIPSets(*o); ok {
			if err != nil {
				return nil, err
			}
			ipsets = append(ipsets, sets...)
			readAs = append(readAs, how)
			for _, set := range sets {
				if set.Name == "KUBE-IPVS-IPS" {
					// kube-proxy's IPVS mode lists in this set every address it binds on kube-ipvs0.
					for _, m := range set.Members {
						if a, err := netip.ParseAddr(m); err == nil {
							served = append(served, a)
						}
					}
				}
			}
			continue
		}
		read := false
		raw := o.WithCommand()
		// The readers take raw; the paste's own text of the output may go (a copy of the dump when the output
		// is followed by the end line).
		o.Text = ""
		for _, e := range sniffers {
			sn, ok, err := e.Sniff(raw)
			if !ok {
				continue
			}
			if err != nil {
				where := fmt.Sprintf("line %d", o.Line)
				if o.Command != "" {
					where = fmt.Sprintf("the output of `%s` (line %d)", o.Command, o.Line)
				}
				if len(p.Outputs) == 1 && len(p.Stripped) == 0 {
					return nil, err
				}
				return nil, fmt.Errorf("%s: %v", where, err)
			}
			if len(raws[e.Name()]) == 0 {
				order = append(order, e)
			}
			raws[e.Name()] = append(raws[e.Name()], raw)
			parts[e.Name()] = sn
			readAs = append(readAs, sn.ReadAs...)
			served = append(served, sn.Local...)
			read = true
			break
		}
		if !read {
			return nil, fmt.Errorf("line %d: no reader for this output (`%s`)", o.Line, o.Command)
		}
	}
	s := &snapshot.Snapshot{Version: snapshot.Version, Engines: map[dataplanes.Name]json.RawMessage{}}
	for _, e := range order {
		outs := raws[e.Name()]
		if len(outs) == 1 {
			s.Engines[e.Name()] = parts[e.Name()].Part
			s.KeepSniffed(e.Name(), parts[e.Name()].Parsed)
			continue
		}
		// One part per engine: its outputs together, each after its command line.
		sn, ok, err := e.Sniff(strings.Join(outs, "\n"))
		if !ok || err != nil {
			return nil, fmt.Errorf("%s outputs read one by one but not together: %v", e.Name(), err)
		}
		s.Engines[e.Name()] = sn.Part
		s.KeepSniffed(e.Name(), sn.Parsed)
	}
	s.Net = localState(local, served)
	s.Net.IPSets = ipsets
	if len(s.Engines) == 0 && len(ipsets) > 0 {
		return nil, fmt.Errorf("the input holds ipsets only: a trace needs the rules that match them (iptables-save) or the IPVS table (ipvsadm -Ln)")
	}
	if len(p.Stripped) > 0 {
		s.Read = append(s.Read, "stripped: "+strings.Join(p.Stripped, ", "))
	}
	if len(p.Skipped) > 0 {
		s.Read = append(s.Read, "left out: the output of "+quoteAll(p.Skipped)+" (no dump k8sguide reads)")
	}
	s.Read = append(s.Read, "read as: "+strings.Join(readAs, ", "))
	return s, nil
}

// localState is a pasted dump's node: the addresses the user gave as its own, and those the dumps show
// Services on, bound where kube-proxy's IPVS mode binds them.
func localState(own, served []netip.Addr) netstate.State {
	st := netstate.FromLocalAddresses(own)
	st.AddrsUnknown = len(own) == 0
	st.AddServiceAddresses(served)
	return st
}

// readIPSets reads an output of `ipset list` or `ipset save` (ok is false for any other), and says how.
func readIPSets(o paste.Output) (sets []netstate.IPSet, how string, ok bool, err error) {
	parse, how := netstate.ParseIPSetList, "ipset list"
	switch {
	case netstate.IsIPSetList(o.Text):
	case netstate.IsIPSetSave(o.Text):
		parse, how = netstate.ParseIPSetSave, "ipset save"
	default:
		return nil, "", false, nil
	}
	if sets, err = parse(o.Text); err != nil {
		return nil, "", true, fmt.Errorf("the output of `%s` (line %d): %v", cmp.Or(o.Command, how), o.Line, err)
	}
	cut := 0
	for _, set := range sets {
		if !set.Complete() {
			cut++
		}
	}
	how += fmt.Sprintf(" (%d sets", len(sets))
	if cut > 0 {
		how += fmt.Sprintf(", %d cut short", cut)
	}
	return sets, how + ")", true, nil
}

func quoteAll(cmds []string) string {
	q := make([]string, len(cmds))
	for i, c := range cmds {
		q[i] = "`" + c + "`"
	}
	return strings.Join(q, ", ")
}

// LoadFile is Load of a file, or of in when path is "-" (what `--snapshot FILE` reads); a parse error names
// the file.
func LoadFile(path string, in io.Reader, local []netip.Addr) (*snapshot.Snapshot, error) {
	size := int64(-1)
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			if st.Size() > MaxInput {
				return nil, fmt.Errorf("%s: %d MB is more than a node's dump (k8sguide reads up to %d MB; a node with 5,000 Services dumps about 10)", path, st.Size()>>20, MaxInput>>20)
			}
			size = st.Size()
		}
		in = f
	}
	data, text, err := readDump(in, size, true)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	var s *snapshot.Snapshot
	if data != nil {
		s, err = Load(data, local)
	} else {
		s, err = loadText(text, local)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return s, nil
}

// MaxInput is the most `--snapshot` reads: far more than any node's dump (a snapshot of a node with 5,000
// Services is about 10 MB), little enough that reading and parsing it stays well under 500 MB.
const MaxInput = 64 << 20

// ReadInput reads a dump of at most MaxInput bytes, and refuses binary data (NUL bytes at its start: /dev/zero,
// an image, a core file) before reading the rest.
func ReadInput(in io.Reader) ([]byte, error) {
	data, _, err := readDump(in, -1, false)
	return data, err
}

// readDump is ReadInput, into one buffer of the input's size when size (>= 0) says it. With asText, a dump that
// does not start as JSON (past a byte-order mark and blanks) is read into a string (text, data nil), which the
// text readers take without another copy; JSON (a snapshot, nft -j) is read into data, which its decoder takes.
func readDump(in io.Reader, size int64, asText bool) (data []byte, text string, err error) {
	head := make([]byte, 64<<10)
	if size >= 0 && size < int64(len(head)) {
		head = head[:size+1] // +1: reading past the end says it is the end
	}
	n, err := io.ReadFull(in, head)
	head = head[:n]
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return nil, "", err
	}
	if bytes.IndexByte(head, 0) >= 0 {
		return nil, "", fmt.Errorf("the input is binary data (NUL bytes), not a snapshot or a tool's text output")
	}
	if err != nil { // all of it was read
		return head, "", nil
	}
	rest := io.LimitReader(in, MaxInput+1-int64(n))
	tooBig := fmt.Errorf("the input is more than %d MB, more than a node's dump (a node with 5,000 Services dumps about 10)", MaxInput>>20)
	if start := bytes.TrimLeft(bytes.TrimPrefix(head, []byte("\ufeff")), " \t\r\n"); asText && len(start) > 0 && start[0] != '{' {
		var b strings.Builder
		if size > 0 {
			b.Grow(int(min(size, MaxInput)) + 1)
		}
		b.Write(head)
		if _, err := io.Copy(&b, rest); err != nil {
			return nil, "", err
		}
		if b.Len() > MaxInput {
			return nil, "", tooBig
		}
		text = b.String()
		if strings.IndexByte(text, 0) >= 0 {
			return nil, "", fmt.Errorf("the input holds binary data (NUL bytes), not a snapshot or a tool's text output")
		}
		return nil, text, nil
	}
	data = head
	if size > int64(n) {
		data = make([]byte, n, min(size, MaxInput)+1)
		copy(data, head)
	}
	for {
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
		m, err := rest.Read(data[len(data):cap(data)])
		data = data[:len(data)+m]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, "", err
		}
	}
	if len(data) > MaxInput {
		return nil, "", tooBig
	}
	if bytes.IndexByte(data, 0) >= 0 {
		return nil, "", fmt.Errorf("the input holds binary data (NUL bytes), not a snapshot or a tool's text output")
	}
	return data, "", nil
}

// opened is a snapshot's engines, ready for the walk.
type opened struct {
	dataplane dataplanes.Name
	rulesets  []netfilter.Ruleset
	walker    dataplanes.PacketWalker
	// missing is what the parts lack that a Service's answer needs (see dataplanes.Opened.Missing);
	// missingAfterFilter, that all of it acts after the filter table's INPUT and FORWARD chains.
	missing            []string
	missingAfterFilter bool
	// scoped are, by engine, its rulesets read in part for one packet (CollectFor).
	scoped map[dataplanes.Name][]dataplanes.Scoped
}

// open opens every engine part of the snapshot, in the engines' order, and names the node's dataplane: the one the
// snapshot says, else the first engine whose part serves Services, unless a later one supersedes it (IPVS keeps
// kube-proxy's rules in iptables).
func open(s *snapshot.Snapshot, scopes map[dataplanes.Name]*dataplanes.Scope) (*opened, error) {
	o := &opened{dataplane: s.Dataplane}
	covered := map[string]bool{}
	walkers := map[dataplanes.Name]dataplanes.PacketWalker{}
	var parts []dataplanes.Name
	for _, e := range engines.All {
		if s.Part(e.Name()) != nil {
			parts = append(parts, e.Name())
		}
	}
	for _, e := range engines.All {
		part := s.Part(e.Name())
		if part == nil {
			continue
		}
		op, err := e.Open(part, dataplanes.OpenOptions{Node: s.Node, Covered: maps.Clone(covered), Parts: parts, Scope: scopes[e.Name()],
			Sniffed: s.TakeSniffed(e.Name())})
		if err != nil {
			return nil, err
		}
		for _, t := range op.Covers {
			covered[t] = true
		}
		o.rulesets = append(o.rulesets, op.Rulesets...)
		for _, r := range op.Rulesets {
			if sr, ok := r.(dataplanes.Scoped); ok {
				if o.scoped == nil {
					o.scoped = map[dataplanes.Name][]dataplanes.Scoped{}
				}
				o.scoped[e.Name()] = append(o.scoped[e.Name()], sr)
			}
		}
		if len(op.Missing) > 0 {
			o.missingAfterFilter = op.MissingAfterFilter && (len(o.missing) == 0 || o.missingAfterFilter)
		}
		o.missing = append(o.missing, op.Missing...)
		if op.Walker != nil {
			walkers[e.Name()] = op.Walker
		}
		if op.Serves && (o.dataplane == "" || slices.Contains(op.Supersedes, o.dataplane)) {
			o.dataplane = e.Name()
		}
	}
	if o.dataplane == "" {
		// No part serves Services (a filter table alone, another component's chains): the dataplane is still the
		// one whose rules the trace walks, never "".
		for _, e := range engines.All {
			if s.Part(e.Name()) != nil {
				o.dataplane = e.Name()
				break
			}
		}
	}
	o.walker = walkers[o.dataplane]
	if o.walker == nil && len(o.rulesets) == 0 {
		return nil, fmt.Errorf("the snapshot holds no iptables or nftables rules or IPVS table")
	}
	return o, nil
}

// Trace walks the request's packet through the snapshot's node.
func Trace(s *snapshot.Snapshot, req Request) (*trace.Trace, error) {
	return Open(s).Trace(req)
}

// Opened is a snapshot whose engine parts are parsed once (on the first Trace) for any number of walks: parsing
// a node's rules costs far more than walking one packet through them, and WaitServing walks every Service of a
// lab through the same snapshot.
type Opened struct {
	snap   *snapshot.Snapshot
	opened *opened
	err    error
	// scopes, by engine, let the walks read what they reach inside the node (CollectFor).
	scopes map[dataplanes.Name]*dataplanes.Scope
}

// Open prepares s for walks.
func Open(s *snapshot.Snapshot) *Opened { return &Opened{snap: s} }

// Trace walks the request's packet through the snapshot's node.
func (op *Opened) Trace(req Request) (*trace.Trace, error) {
	s := op.snap
	dst, err := trace.ParseDst(req.Dst)
	if err != nil {
		return nil, fmt.Errorf("--dst %v", err)
	}
	proto := strings.ToLower(req.Proto)
	if proto == "" {
		proto = "tcp"
	}
	if proto != "tcp" && proto != "udp" && proto != "sctp" {
		return nil, fmt.Errorf("--proto %q: want tcp, udp or sctp", req.Proto)
	}
	from := req.From
	if from == "" {
		from = "client"
	}
	flow := trace.Flow{Dst: dst.Addr(), Dport: dst.Port(), Proto: proto, Quiet: req.Quiet}
	origin := netfilter.Origin{}
	switch {
	case from == "client":
		flow.Src = netip.MustParseAddr(DefaultClientIP)
		if s.Kubernetes != nil && s.Kubernetes.ClientIP != "" {
			if a, err := netip.ParseAddr(s.Kubernetes.ClientIP); err == nil {
				flow.Src = a
			}
		}
	case from == "node":
		origin.FromNode = true
	case strings.HasPrefix(from, "pod/"):
		ip, err := podIP(s, strings.TrimPrefix(from, "pod/"))
		if err != nil {
			return nil, err
		}
		flow.Src = ip
	default:
		return nil, fmt.Errorf("--from %q: want client, node or pod/NAME", from)
	}
	if req.Src != "" {
		if flow.Src, flow.Sport, err = trace.ParseSrc(req.Src); err != nil {
			return nil, fmt.Errorf("--src %v", err)
		}
	}
	if req.Sport != 0 && flow.Sport == 0 {
		flow.Sport = req.Sport
	}
	if origin.FromNode && !flow.Src.IsValid() {
		flow.Src = nodeSource(&s.Net, flow.Dst)
	}
	if !origin.FromNode {
		if r, ok := s.Net.Lookup(flow.Src); ok {
			origin.Iif = r.Dev
		} else {
			origin.Iif = "eth0"
		}
		if req.InIface != "" {
			origin.Iif = req.InIface
		}
	}
	net := &s.Net
	var assumed []string
	if s.Read != nil {
		// A pasted dump has no interfaces or routes: what rules on -i/-o (or iifname/oifname) see is assumed.
		if req.OutIface != "" {
			n := s.Net
			n.Routes = slices.Clone(n.Routes)
			for i, r := range n.Routes {
				if r.Table != "local" {
					n.Routes[i].Dev = req.OutIface
				}
			}
			n.OutAssumed = false // given
			net = &n
		}
		in, out := origin.Iif, cmp.Or(req.OutIface, "eth0")
		if origin.FromNode {
			in = "(made on the node)"
		}
		how := "assumed"
		if req.InIface != "" || req.OutIface != "" {
			how = "as given"
		}
		assumed = append(assumed, fmt.Sprintf("interfaces %s: the packet arrives on %s and leaves by %s (the dump names none; --in-iface and --out-iface say otherwise)", how, in, out))
	}
	if op.opened == nil && op.err == nil {
		op.opened, op.err = open(s, op.scopes)
	}
	if op.err != nil {
		return nil, op.err
	}
	o := op.opened
	if proto == "sctp" && o.dataplane == dataplanes.EBPF {
		// Cilium balances SCTP only when built with enable-sctp, which a snapshot does not record; the walk
		// follows the TCP and UDP paths of lb4_extract_tuple.
		return nil, fmt.Errorf("--proto sctp: traced through iptables, nftables and IPVS rules; Cilium's SCTP load balancing (enable-sctp) is not modelled")
	}
	t := &trace.Trace{Dataplane: string(o.dataplane), Node: s.Node, Packet: trace.Packet{
		Src: srcString(flow), Dst: dst.String(), Proto: proto, From: from, InIface: origin.Iif}}
	var names netfilter.Names
	if s.Kubernetes != nil {
		names = s.PodByIP
	}
	if o.walker != nil {
		if t.Paths, t.Notes, t.Conntrack, err = o.walker.Walk(flow, origin.Iif, origin.FromNode, names); err != nil {
			return nil, err
		}
		// The engine knows where its program took the packet (a pod's own veth, on an ebpf node), which the
		// route to the source need not say.
		if len(t.Paths) > 0 && len(t.Paths[0].Hops) > 0 {
			hook := t.Paths[0].Hops[0].Hook
			if dev, ok := strings.CutPrefix(hook, "tcx ingress "); ok {
				t.Packet.InIface = dev
			} else if strings.HasPrefix(hook, "cgroup ") {
				t.Packet.InIface = "" // the socket LB takes a connect(), before any packet reaches an interface
			}
		}
		t.Notes = append(t.Notes, leavesForNode(s, t.Paths, flow)...)
		t.Notes = append(t.Notes, untranslatedForward(s, t.Paths, flow)...)
		t.Finish()
		t.Notes = append(slices.Clone(s.Read), t.Notes...)
		if t.Service == "" {
			t.Service = serviceAt(s, flow) // map lookups carry no comment
		}
		t.Service = qualifyService(s, t.Service, flow)
		return t, nil
	}
	r := netfilter.Outcomes(o.rulesets, net, flow, origin, names)
	t.Paths, t.Notes, t.Conntrack, t.Unexplored = r.Paths, r.Notes, r.Conntrack, r.Unexplored
	// A path that ends untranslated through parts that lack where Services are translated says nothing about
	// the Service: it is unknown, not "forwarded without translation" — unless the packet is for one of the
	// node's own addresses on a port no Service takes by default, where the reading that nothing translates it
	// answers (the filter table alone: "is tcp 80 to this node accepted?"), and the trace says it assumed so.
	if len(o.missing) > 0 && t.Conntrack == nil {
		if assumption := untranslatedReading(net, flow, o.missing); assumption != "" {
			t.Notes = append(t.Notes, assumption)
		} else {
			missing := o.missing
			if !knowsAddresses(net) && !inNodePortRange(flow.Dport) {
				missing = append(slices.Clone(missing), fmt.Sprintf("whether %s is one of this node's addresses (--local-addresses): for the node's own address and a port outside the NodePort range, the input answers", flow.Dst))
			}
			for i, p := range t.Paths {
				if p.Endpoint == nil && p.Verdict != trace.Unknown && !decidedBefore(p, o.missingAfterFilter) {
					// Dropped or rejected too: what the missing part translates would have gone elsewhere.
					t.Paths[i].Verdict, t.Paths[i].Missing, t.Paths[i].Reply = trace.Unknown, append(p.Missing, missing...), nil
					t.Paths[i].VerdictBy = nil
				}
			}
		}
	}
	// Paths equally likely are listed in a round-robin scheduler's order, the order new connections take.
	sort.SliceStable(t.Paths, func(i, j int) bool { return turnOf(t.Paths[i]) < turnOf(t.Paths[j]) })
	t.Notes = append(t.Notes, leavesForNode(s, t.Paths, flow)...)
	t.Notes = append(t.Notes, untranslatedForward(s, t.Paths, flow)...)
	t.Finish()
	t.Notes = append(append(slices.Clone(s.Read), assumed...), t.Notes...)
	if t.Service == "" {
		t.Service = serviceAt(s, flow)
	}
	t.Service = qualifyService(s, t.Service, flow)
	return t, nil
}

// leavesForNode marks the delivered paths that leave, untranslated, for another node of the cluster: the packet
// is addressed to that node (another node's NodePort, from a pod or this node), whose own rules then translate
// it and decide the source its endpoint sees. This node's walk cannot say either, and the answer is not this
// node's: the path names the next node, claims no endpoint source and no reply, and a note says how to walk on.
// untranslatedForward explains the paths that leave the node with the destination untouched, not for another
// node: where they go, and whether anything can answer. A ClusterIP on a port its Service lacks is owned by no
// host, so nothing answers (a real connection times out); an address the cluster does not know is answered by
// whatever owns it beyond the node, if anything — never "the pod".
func untranslatedForward(s *snapshot.Snapshot, paths []trace.Path, f trace.Flow) []string {
	var notes []string
	for i, p := range paths {
		if p.Verdict != trace.Delivered || p.Endpoint != nil || p.NextNode != "" {
			continue
		}
		where := "it leaves the node"
		if p.Egress != "" {
			where += " by " + p.Egress
		}
		dst := netip.AddrPortFrom(f.Dst, f.Dport)
		if pod, node := s.PodByIP(f.Dst); pod != "" {
			// Addressed to a pod itself: that pod is who answers, untranslated, if it listens on the port.
			paths[i].Endpoint = &trace.Endpoint{IP: f.Dst.String(), Port: int(f.Dport), Pod: pod, Node: node}
			notes = append(notes, fmt.Sprintf("no rule translated %s %s, pod %s's own address: %s untranslated, and the pod answers if it listens on port %d", f.Proto, dst, pod, where, f.Dport))
			continue
		}
		if svc, ports := clusterIPOf(s, f.Dst); svc != "" {
			paths[i].NoAnswer = fmt.Sprintf("%s is the ClusterIP of %s, which has no %s port %d (its ports: %s), and no host owns a ClusterIP", f.Dst, svc, f.Proto, f.Dport, ports)
			paths[i].Reply = nil
			notes = append(notes, fmt.Sprintf("no rule translated %s %s: %s untranslated, and nothing answers: %s (a real connection times out)", f.Proto, dst, where, paths[i].NoAnswer))
			continue
		}
		owner := "whatever owns it beyond the node answers, if anything"
		if s.Kubernetes != nil && !clusterOwns(s, f.Dst) {
			owner = "no node, pod or Service of the cluster owns it: only a host beyond the node could answer"
		}
		if p.Reply != nil {
			p.Reply.Text = fmt.Sprintf("whatever owns %s beyond the node answers %s, if anything does; nothing to undo", dst, p.Reply.To)
		}
		notes = append(notes, fmt.Sprintf("no rule translated %s %s: %s untranslated; %s", f.Proto, dst, where, owner))
	}
	return notes
}

// clusterIPOf names the Service whose ClusterIP ip is, with its ports ("" when none has it).
func clusterIPOf(s *snapshot.Snapshot, ip netip.Addr) (svc, ports string) {
	if s.Kubernetes == nil {
		return "", ""
	}
	for _, k := range s.Kubernetes.Services {
		if k.ClusterIP != ip.String() {
			continue
		}
		var ps []string
		for _, p := range k.Ports {
			ps = append(ps, fmt.Sprintf("%s/%d", strings.ToLower(p.Protocol), p.Port))
		}
		return k.Namespace + "/" + k.Name, strings.Join(ps, ", ")
	}
	return "", ""
}

// clusterOwns says whether ip is a node's, a pod's or a Service's address in the snapshot.
func clusterOwns(s *snapshot.Snapshot, ip netip.Addr) bool {
	a := ip.String()
	for _, n := range s.Kubernetes.Nodes {
		if n.IP == a {
			return true
		}
	}
	for _, p := range s.Kubernetes.Pods {
		if p.IP == a {
			return true
		}
	}
	for _, k := range s.Kubernetes.Services {
		if k.ClusterIP == a {
			return true
		}
	}
	return false
}

func leavesForNode(s *snapshot.Snapshot, paths []trace.Path, f trace.Flow) []string {
	if s.Kubernetes == nil || s.Net.IsLocal(f.Dst) {
		return nil
	}
	next := ""
	for _, n := range s.Kubernetes.Nodes {
		if n.IP == f.Dst.String() && n.Name != s.Node {
			next = n.Name
		}
	}
	if next == "" {
		return nil
	}
	var notes []string
	for i, p := range paths {
		if p.Verdict != trace.Delivered || p.Endpoint != nil {
			continue
		}
		src := f.Src.String()
		if p.SNAT != "" {
			src = p.SNAT
		}
		if a, err := netip.ParseAddrPort(src); err == nil {
			src = a.Addr().String()
		}
		paths[i].NextNode, paths[i].SNAT, paths[i].Reply = next, "", nil
		note := fmt.Sprintf("the packet leaves for node %s (%s) with source %s: that node's rules take it on, "+
			"and decide the endpoint and the source it sees (walk on with --node %s --src %s)",
			next, f.Dst, src, next, src)
		if p.SNAT == trace.Unknown {
			note = fmt.Sprintf("the packet leaves for node %s (%s), with a source the input cannot tell (see Missing): "+
				"that node's rules take it on, and decide the endpoint and the source it sees", next, f.Dst)
		}
		if !slices.Contains(notes, note) {
			notes = append(notes, note)
		}
	}
	return notes
}

func turnOf(p trace.Path) int {
	if p.Endpoint == nil || p.Endpoint.Turn == 0 {
		return 1 << 30
	}
	return p.Endpoint.Turn
}

// serviceAt names the Service whose ClusterIP or NodePort the packet is sent to, for engines whose rules do
// not name it (IPVS virtual servers and Cilium's maps carry no comment).
func serviceAt(s *snapshot.Snapshot, f trace.Flow) string {
	if s.Kubernetes == nil {
		return ""
	}
	local := s.Net.IsLocal(f.Dst)
	for _, k := range s.Kubernetes.Services {
		for _, p := range k.Ports {
			if !strings.EqualFold(p.Protocol, f.Proto) {
				continue
			}
			if (k.ClusterIP == f.Dst.String() && p.Port == int32(f.Dport)) || (local && p.NodePort == int32(f.Dport)) {
				return k.Namespace + "/" + k.Name
			}
		}
	}
	return ""
}

func srcString(f trace.Flow) string {
	if f.Sport != 0 {
		return netip.AddrPortFrom(f.Src, f.Sport).String()
	}
	return f.Src.String()
}

// NodePortRange is kube-proxy's default --service-node-port-range: where a Service takes a port of every node.
var NodePortRange = [2]uint16{30000, 32767}

func inNodePortRange(port uint16) bool { return port >= NodePortRange[0] && port <= NodePortRange[1] }

// untranslatedReading is the assumption under which a dump that lacks where Services are translated still
// answers for a packet: it is for one of the node's own addresses, on a port outside the NodePort range, so no
// ClusterIP and, by default, no NodePort is in play. It returns the note that says so ("" when the reading does
// not hold: the path is then unknown).
func untranslatedReading(net *netstate.State, flow trace.Flow, missing []string) string {
	if !net.IsLocal(flow.Dst) || net.DeviceOf(flow.Dst) == netstate.IPVSDevice || inNodePortRange(flow.Dport) {
		return ""
	}
	var what []string
	for _, m := range missing {
		if i := strings.IndexAny(m, ",:("); i > 0 {
			m = strings.TrimSpace(m[:i])
		}
		what = append(what, m)
	}
	return fmt.Sprintf("assumed: %s (not in the input) leaves %s:%d alone: the address is this node's and %d is outside the NodePort range %d-%d, where kube-proxy translates (a hostPort or another DNAT there would change the answer)",
		strings.Join(what, " and "), flow.Dst, flow.Dport, flow.Dport, NodePortRange[0], NodePortRange[1])
}

// knowsAddresses says whether the node's state names any address of its own besides loopback.
func knowsAddresses(n *netstate.State) bool {
	for _, a := range n.Addresses {
		if a.Dev != "lo" {
			return true
		}
	}
	return false
}

// decidedBefore says whether a path was dropped or rejected before what the input lacks would act: before any nat
// hook (by the raw or mangle table at PREROUTING or OUTPUT), or, when all it lacks acts after the filter table's
// INPUT and FORWARD (the IPVS table), anywhere up to them. What the missing part does cannot change that.
func decidedBefore(p trace.Path, missingAfterFilter bool) bool {
	if p.VerdictBy == nil || p.Verdict != trace.Dropped && p.Verdict != trace.Rejected {
		return false
	}
	by := p.VerdictBy
	if missingAfterFilter && (by.Hook == "PREROUTING" || by.Hook == "INPUT" || by.Hook == "FORWARD") {
		return true
	}
	return by.Table == "raw" || by.Table == "mangle" && (by.Hook == "PREROUTING" || by.Hook == "OUTPUT")
}

// nodeSource is the source the node's own socket would use to reach dst.
func nodeSource(n *netstate.State, dst netip.Addr) netip.Addr {
	if n.IsLocal(dst) {
		return dst
	}
	if r, ok := n.Lookup(dst); ok {
		if a := n.SourceFor(r, dst); a.IsValid() {
			return a
		}
	}
	if p := n.PrimaryAddresses(); len(p) > 0 {
		return p[0]
	}
	return netip.MustParseAddr("127.0.0.1")
}

func podIP(s *snapshot.Snapshot, name string) (netip.Addr, error) {
	if s.Kubernetes != nil {
		var known []string
		for _, p := range s.Kubernetes.Pods {
			if p.Name == name || p.Namespace+"/"+p.Name == name {
				return netip.ParseAddr(p.IP)
			}
			known = append(known, p.Name)
		}
		return netip.Addr{}, fmt.Errorf("--from pod/%s: no such pod (known: %s)", name, strings.Join(known, ", "))
	}
	return netip.Addr{}, fmt.Errorf("--from pod/%s: the input names no pods; use --src POD_IP", name)
}

// qualifyService turns a rule's "namespace/name" into "namespace/name:port" using the snapshot's Services.
func qualifyService(s *snapshot.Snapshot, svc string, f trace.Flow) string {
	if svc == "" || strings.Contains(svc, ":") || s.Kubernetes == nil {
		return svc
	}
	for _, k := range s.Kubernetes.Services {
		if k.Namespace+"/"+k.Name != svc {
			continue
		}
		for _, p := range k.Ports {
			if !strings.EqualFold(p.Protocol, f.Proto) {
				continue
			}
			if p.NodePort == int32(f.Dport) || (p.Port == int32(f.Dport) && k.ClusterIP == f.Dst.String()) || len(k.Ports) == 1 {
				if p.Name != "" {
					return svc + ":" + p.Name
				}
				return svc + ":" + strconv.Itoa(int(p.Port))
			}
		}
	}
	return svc
}
