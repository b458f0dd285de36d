// Package tracer answers `k8sguide trace`: it reads a snapshot (or raw rules), picks the engines that are
// present on the node, walks the packet through them and names what it finds.
package tracer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/ebpf"

	"github.com/k8sguide/k8sguide/dataplanes/iptables"
	"github.com/k8sguide/k8sguide/dataplanes/ipvs"
	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
	"github.com/k8sguide/k8sguide/dataplanes/netstate"
	"github.com/k8sguide/k8sguide/dataplanes/nftables"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/kerneltrace"
	"github.com/k8sguide/k8sguide/inspect/snapshot"
)

// DefaultClientIP is where outside traffic comes from when the snapshot does not say: the gateway of kind's
// Docker network, which is also the netns lab's client.
const DefaultClientIP = "172.18.0.1"

// Request is one `trace` question.
type Request struct {
	Dst   string // IP:PORT
	Src   string // IP or IP:PORT; "" picks the natural source for From
	Proto string // tcp (default) or udp
	From  string // client (default), node, pod/NAME
	// Sport fixes the source port when Src does not (verification uses a fresh one).
	Sport uint16
}

// Load reads what `trace --snapshot` accepts: a k8sguide snapshot, `nft list ruleset` or
// `nft -j list ruleset` output, an iptables-save dump (whole or a fragment), `iptables -L -n [-v]` listings
// or `ipvsadm -Ln`. Raw rules say nothing about the node's addresses: local lists what the node owns (addrtype
// LOCAL / fib daddr type local).
func Load(data []byte, local []netip.Addr) (*snapshot.Snapshot, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("the input is empty")
	}
	if trimmed[0] == '{' {
		// One decode serves both: a snapshot has a version, and nft -j's top-level "nftables" array lands in
		// the snapshot's field of the same name.
		var s snapshot.Snapshot
		if err := json.Unmarshal(trimmed, &s); err != nil {
			return nil, fmt.Errorf("the input looks like JSON but does not parse as a snapshot or nft -j output: %v", err)
		}
		switch {
		case s.Version == snapshot.Version:
			if len(local) > 0 {
				s.Net = netstate.FromLocalAddresses(local)
			}
			return &s, nil
		case s.Version != "":
			return nil, fmt.Errorf("snapshot version %s: this k8sguide reads %s", s.Version, snapshot.Version)
		case len(s.Nftables) > 0:
			if _, err := nftables.ParseRuleset(trimmed, ""); err != nil {
				return nil, fmt.Errorf("nft -j ruleset: %v", err)
			}
			return &snapshot.Snapshot{Version: snapshot.Version, Nftables: json.RawMessage(trimmed), Net: netstate.FromLocalAddresses(local)}, nil
		}
		return nil, fmt.Errorf("JSON input is neither a k8sguide snapshot nor `nft -j list ruleset` output")
	}
	text := string(data)
	if ipvs.IsList(text) {
		st, err := ipvs.ParseList(text)
		if err != nil {
			return nil, fmt.Errorf("ipvsadm -Ln: %v", err)
		}
		return &snapshot.Snapshot{Version: snapshot.Version, IPVS: st, Dataplane: string(dataplanes.IPVS), Net: netstate.FromLocalAddresses(local)}, nil
	}
	if looksLikeNft(text) {
		if _, err := nftables.ParseText(text); err != nil {
			return nil, fmt.Errorf("nft list ruleset: %v", err)
		}
		return &snapshot.Snapshot{Version: snapshot.Version, NftablesText: text, Net: netstate.FromLocalAddresses(local)}, nil
	}
	if iptables.IsListing(text) {
		if _, err := iptables.ParseListing(text, ""); err != nil {
			return nil, fmt.Errorf("iptables listing: %v", err)
		}
	} else if _, err := iptables.ParseSave(text); err != nil {
		return nil, fmt.Errorf("iptables-save input: %v", err)
	}
	return &snapshot.Snapshot{Version: snapshot.Version, Iptables: map[string]string{"input": text}, Net: netstate.FromLocalAddresses(local)}, nil
}

// LoadFile is Load of a file, or of in when path is "-" (what `--snapshot FILE` reads); a parse error names
// the file.
func LoadFile(path string, in io.Reader, local []netip.Addr) (*snapshot.Snapshot, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(in)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	s, err := Load(data, local)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return s, nil
}

// looksLikeNft says whether text is `nft list` output: its first line that is not a comment opens a table.
func looksLikeNft(text string) bool {
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		return strings.HasPrefix(l, "table ")
	}
	return false
}

// rulesets builds the engines present in the snapshot. iptables-nft tables are also nf_tables tables: the
// nftables engine skips the ones the iptables view already covers, and the tracer's own tracing table.
func rulesets(s *snapshot.Snapshot) ([]netfilter.Ruleset, string, error) {
	var out []netfilter.Ruleset
	dataplane := s.Dataplane
	skip := map[string]bool{}
	for _, backend := range []string{"nf_tables", "legacy", "input"} {
		text, ok := s.Iptables[backend]
		if !ok {
			continue
		}
		var r *iptables.Rules
		var err error
		if iptables.IsListing(text) {
			r, err = iptables.ParseListing(text, "")
		} else {
			r, err = iptables.ParseSave(text)
		}
		if err != nil {
			return nil, "", fmt.Errorf("iptables (%s): %v", backend, err)
		}
		if backend != "legacy" {
			for t := range r.Tables {
				skip[t] = true
			}
		}
		out = append(out, r)
		if dataplane == "" && r.HasKubeProxy() {
			dataplane = "iptables"
		}
	}
	if len(s.Nftables) > 0 || s.NftablesText != "" {
		var rs *nftables.Ruleset
		var err error
		if len(s.Nftables) > 0 {
			rs, err = nftables.ParseRuleset(s.Nftables, s.NftablesText)
		} else {
			rs, err = nftables.ParseText(s.NftablesText)
		}
		if err != nil {
			return nil, "", fmt.Errorf("nftables: %v", err)
		}
		for _, t := range rs.Tables {
			if strings.HasPrefix(t.Name, kerneltrace.TablePrefix) {
				skip[t.Name] = true
			}
		}
		rs.Skip = skip
		out = append(out, rs)
		if dataplane == "" && rs.Table("ip", "kube-proxy") != nil {
			dataplane = "nftables"
		}
	}
	if s.IPVS != nil {
		out = append(out, &ipvs.Ruleset{State: s.IPVS})
		if dataplane == "" || dataplane == string(dataplanes.IPTables) {
			dataplane = string(dataplanes.IPVS)
		}
	}
	if len(out) == 0 {
		return nil, "", fmt.Errorf("the snapshot holds no iptables or nftables rules or IPVS table")
	}
	return out, dataplane, nil
}

// Trace walks the request's packet through the snapshot's node.
func Trace(s *snapshot.Snapshot, req Request) (*trace.Trace, error) {
	dst, err := netip.ParseAddrPort(req.Dst)
	if err != nil || !dst.Addr().Is4() {
		return nil, fmt.Errorf("--dst %q: want IPv4:PORT, e.g. 172.18.0.3:30080", req.Dst)
	}
	proto := strings.ToLower(req.Proto)
	if proto == "" {
		proto = "tcp"
	}
	if proto != "tcp" && proto != "udp" {
		return nil, fmt.Errorf("--proto %q: want tcp or udp", req.Proto)
	}
	from := req.From
	if from == "" {
		from = "client"
	}
	flow := trace.Flow{Dst: dst.Addr(), Dport: dst.Port(), Proto: proto}
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
		if ap, err := netip.ParseAddrPort(req.Src); err == nil && ap.Addr().Is4() {
			flow.Src, flow.Sport = ap.Addr(), ap.Port()
		} else if a, err := netip.ParseAddr(req.Src); err == nil && a.Is4() {
			flow.Src = a
		} else {
			return nil, fmt.Errorf("--src %q: want IPv4 or IPv4:PORT", req.Src)
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
	}
	if s.EBPF != nil && (s.Dataplane == string(dataplanes.EBPF) || s.Dataplane == "" && s.Iptables == nil && s.NftablesText == "" && len(s.Nftables) == 0) {
		return traceEBPF(s, flow, from, origin)
	}
	rs, dataplane, err := rulesets(s)
	if err != nil {
		return nil, err
	}
	t := &trace.Trace{Dataplane: dataplane, Node: s.Node, Packet: trace.Packet{
		Src: srcString(flow), Dst: dst.String(), Proto: proto, From: from, InIface: origin.Iif}}
	var names netfilter.Names
	if s.Kubernetes != nil {
		names = s.PodByIP
	}
	t.Paths, t.Notes, t.Conntrack = netfilter.Run(rs, &s.Net, flow, origin, names)
	// Paths equally likely are listed in a round-robin scheduler's order, the order new connections take.
	sort.SliceStable(t.Paths, func(i, j int) bool { return turnOf(t.Paths[i]) < turnOf(t.Paths[j]) })
	t.Finish()
	if t.Service == "" {
		t.Service = serviceAt(s, flow)
	}
	t.Service = qualifyService(s, t.Service, flow)
	return t, nil
}

func turnOf(p trace.Path) int {
	if p.Endpoint == nil || p.Endpoint.Turn == 0 {
		return 1 << 30
	}
	return p.Endpoint.Turn
}

// serviceAt names the Service whose ClusterIP or NodePort the packet is sent to, for engines whose rules do
// not name it (IPVS virtual servers carry no comment).
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

// traceEBPF walks Cilium's maps. bpf_host's cil_from_netdev sees packets that arrive on an interface it is
// attached to; a packet the node makes itself reaches Cilium's load-balancer only through the socket LB
// (bpf_sock), which this datapath does not load.
func traceEBPF(s *snapshot.Snapshot, flow trace.Flow, from string, origin netfilter.Origin) (*trace.Trace, error) {
	t := &trace.Trace{Dataplane: string(dataplanes.EBPF), Node: s.Node, Packet: trace.Packet{
		Src: srcString(flow), Dst: netip.AddrPortFrom(flow.Dst, flow.Dport).String(), Proto: flow.Proto, From: from, InIface: origin.Iif}}
	if origin.FromNode {
		return nil, fmt.Errorf("--from node: on an ebpf node a packet the node makes goes to Cilium's load-balancer only through the socket LB (bpf_sock), which this datapath does not load; trace from the client or a pod")
	}
	var names func(netip.Addr) (string, string)
	if s.Kubernetes != nil {
		names = s.PodByIP
	}
	t.Paths, t.Notes, t.Conntrack = ebpf.WalkFrom(s.EBPF, flow, origin.Iif, names)
	if len(t.Paths) == 0 {
		return nil, fmt.Errorf("the Cilium maps of %s gave no path for %s", s.Node, t.Packet.Dst)
	}
	t.Finish()
	t.Service = qualifyService(s, t.Service, flow)
	return t, nil
}

func srcString(f trace.Flow) string {
	if f.Sport != 0 {
		return netip.AddrPortFrom(f.Src, f.Sport).String()
	}
	return f.Src.String()
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
