package ipvs

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// State is a node's IPVS table: what `ipvsadm -Ln --stats` and `ipvsadm -Lnc` show, read over netlink and
// from /proc/net/ip_vs_conn.
type State struct {
	Services []VirtualServer `json:"services"`
	// Connections are the kernel's IPVS connection entries (/proc/net/ip_vs_conn): which real server each
	// client connection went to, and how long the entry lives on.
	Connections []Connection `json:"connections,omitempty"`
	// FromPaste is set when the table was read from a pasted ipvsadm listing rather than collected on the node.
	// A paste holds only what its commands printed: without kube-proxy's iptables rules beside it, what
	// masquerades the packets IPVS translates (KUBE-POSTROUTING) is not known (see Ruleset.MasqueradeUnknown).
	FromPaste bool `json:"fromPaste,omitempty"`
	// Cut says the pasted listing may go on past its last line (the paste does not show where it ended): its last
	// virtual server may have more real servers, and more virtual servers may follow.
	Cut bool `json:"cut,omitempty"`
}

// VirtualServer is one IPVS virtual service (kube-proxy makes one per Service port and address: the ClusterIP,
// and each local address for a NodePort).
type VirtualServer struct {
	Protocol  string     `json:"protocol"` // TCP, UDP, SCTP
	Address   netip.Addr `json:"address,omitzero"`
	Port      uint16     `json:"port,omitempty"`
	FWMark    uint32     `json:"fwmark,omitempty"`
	Scheduler string     `json:"scheduler"`
	// Persistent is set for a persistent service (kube-proxy: sessionAffinity ClientIP), with its timeout.
	Persistent bool   `json:"persistent,omitempty"`
	Timeout    uint32 `json:"timeout,omitempty"` // seconds
	// PersistMask is the client netmask persistence groups by, when it is not the whole address ("255.255.255.0"
	// from `persistent 10800 mask 255.255.255.0`): every client in the same network shares a real server.
	PersistMask string `json:"persistMask,omitempty"`
	// Connections is the kernel's count of connections scheduled so far (refreshed by its estimator every 2 s).
	Connections uint32       `json:"connections"`
	RealServers []RealServer `json:"realServers"`
	// FromListing is set when the server was read from `ipvsadm -Ln`, which sorts real servers for display
	// and shows no counters: its order is not the kernel's, and round robin's position cannot be told.
	FromListing bool `json:"fromListing,omitempty"`
	// Printed is set when `ipvsadm -L` (without -n) printed the address or port as a name.
	Printed
}

// RealServer is one destination of a virtual server, in the kernel's list order (the order rr walks).
type RealServer struct {
	Address netip.Addr `json:"address"`
	Port    uint16     `json:"port"`
	// Forward is the forwarding method: Masq (NAT: the destination is rewritten), Local, Tunnel or Route.
	Forward     string `json:"forward"`
	Weight      int    `json:"weight"`
	ActiveConns int    `json:"activeConns"`
	InactConns  int    `json:"inactConns"`
	// Connections is the count of connections scheduled to it so far (refreshed every 2 s, as above).
	Connections uint32 `json:"connections"`
	// Printed is set when `ipvsadm -L` (without -n) printed the address or port as a name.
	Printed
}

// Addr is the virtual server's address and port.
func (v *VirtualServer) Addr() netip.AddrPort { return netip.AddrPortFrom(v.Address, v.Port) }

// Addr is the real server's address and port.
func (r *RealServer) Addr() netip.AddrPort { return netip.AddrPortFrom(r.Address, r.Port) }

// Name is the virtual server as ipvsadm names it: "TCP  172.18.0.3:30080 rr" (with the names it printed, when
// it printed names).
func (v *VirtualServer) Name() string {
	head := fmt.Sprintf("%s  %s", v.Protocol, v.addrText())
	if v.FWMark != 0 {
		head = fmt.Sprintf("FWM  %d", v.FWMark)
	}
	s := head + " " + v.Scheduler
	if v.Persistent {
		s += fmt.Sprintf(" persistent %d", v.Timeout)
		if v.PersistMask != "" {
			s += " mask " + v.PersistMask
		}
	}
	return s
}

// addrText is the address and port as the listing printed them.
func (v *VirtualServer) addrText() string {
	if v.As != "" {
		return v.As
	}
	return v.Addr().String()
}

// Line is the real server as ipvsadm -Ln prints it.
func (r *RealServer) Line() string {
	return fmt.Sprintf("-> %s %s %d %d %d", r.addrText(), r.Forward, r.Weight, r.ActiveConns, r.InactConns)
}

// addrText is the address and port as the listing printed them.
func (r *RealServer) addrText() string {
	if r.As != "" {
		return r.As
	}
	return r.Addr().String()
}

// Connection is one IPVS connection entry.
type Connection struct {
	Protocol string         `json:"protocol"`
	Client   netip.AddrPort `json:"client"`
	Virtual  netip.AddrPort `json:"virtual"`
	Dest     netip.AddrPort `json:"dest"`
	State    string         `json:"state"`
	Expires  int            `json:"expires"` // seconds left
}

// Find returns the virtual server a packet to dst:port (proto tcp/udp/sctp) or with the mark reaches, if any.
// The kernel looks services up by address and port first, then by firewall mark.
func (s *State) Find(proto string, dst netip.Addr, port uint16, mark uint32) *VirtualServer {
	for i := range s.Services {
		v := &s.Services[i]
		if v.FWMark == 0 && v.Unresolved() == "" && strings.EqualFold(v.Protocol, proto) && v.Address == dst && v.Port == port {
			return v
		}
	}
	for i := range s.Services {
		v := &s.Services[i]
		if v.FWMark != 0 && v.FWMark == mark {
			return v
		}
	}
	return nil
}

// Unresolved lists the virtual servers a packet to dst:port might reach but which the listing printed by names it
// does not turn back into their address or port: when Find finds none, the packet's fate depends on them.
func (s *State) Unresolved(proto string, dst netip.Addr, port uint16) []*VirtualServer {
	var out []*VirtualServer
	for i := range s.Services {
		v := &s.Services[i]
		if v.FWMark != 0 || v.Unresolved() == "" || !strings.EqualFold(v.Protocol, proto) {
			continue
		}
		if (v.NoAddress || v.Address == dst) && (v.NoPort || v.Port == port) {
			out = append(out, v)
		}
	}
	return out
}

// Connection finds the entry of a client's connection to a virtual server.
func (s *State) Connection(proto string, client, virtual netip.AddrPort) (*Connection, bool) {
	for i := range s.Connections {
		c := &s.Connections[i]
		if strings.EqualFold(c.Protocol, proto) && c.Client == client && c.Virtual == virtual {
			return c, true
		}
	}
	return nil, false
}

// ParseConnections reads /proc/net/ip_vs_conn (addresses and ports in hex) or `ipvsadm -Lnc` (dotted).
func ParseConnections(text string) ([]Connection, error) {
	var out []Connection
	sc := bufio.NewScanner(strings.NewReader(text))
	n := 0
	for sc.Scan() {
		n++
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] == "Pro" || f[0] == "IPVS" || f[0] == "pro" {
			continue
		}
		var c Connection
		var err error
		switch {
		case len(f) >= 9: // /proc/net/ip_vs_conn: Pro FromIP FPrt ToIP TPrt DestIP DPrt State Expires
			c.Protocol, c.State = f[0], f[7]
			if c.Client, err = hexAddrPort(f[1], f[2]); err == nil {
				if c.Virtual, err = hexAddrPort(f[3], f[4]); err == nil {
					c.Dest, err = hexAddrPort(f[5], f[6])
				}
			}
			if err == nil {
				c.Expires, err = strconv.Atoi(f[8])
			}
		case len(f) == 6: // ipvsadm -Lnc: pro expire state source virtual destination
			c.Protocol, c.State = f[0], f[2]
			c.Expires, err = parseExpire(f[1])
			if err == nil {
				if c.Client, err = netip.ParseAddrPort(f[3]); err == nil {
					if c.Virtual, err = netip.ParseAddrPort(f[4]); err == nil {
						c.Dest, err = netip.ParseAddrPort(f[5])
					}
				}
			}
		default:
			err = fmt.Errorf("want 9 or 6 fields")
		}
		if err != nil {
			return nil, fmt.Errorf("IPVS connection line %d %q: %v", n, sc.Text(), err)
		}
		out = append(out, c)
	}
	return out, sc.Err()
}

// hexAddrPort reads /proc/net/ip_vs_conn's "AC120003" "7530".
func hexAddrPort(ip, port string) (netip.AddrPort, error) {
	b, err := hex.DecodeString(ip)
	if err != nil || len(b) != 4 {
		return netip.AddrPort{}, fmt.Errorf("address %q", ip)
	}
	p, err := strconv.ParseUint(port, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("port %q", port)
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b)), uint16(p)), nil
}

// parseExpire reads ipvsadm's "01:58" (minutes:seconds).
func parseExpire(s string) (int, error) {
	m, sec, ok := strings.Cut(s, ":")
	if !ok {
		return strconv.Atoi(s)
	}
	mi, err1 := strconv.Atoi(m)
	se, err2 := strconv.Atoi(sec)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("expire %q", s)
	}
	return mi*60 + se, nil
}

// ParseList reads `ipvsadm -Ln` or `ipvsadm -L` (the default columns, not --stats or --rate, which it refuses):
// the virtual servers and their real servers, in the listing's order. The listing has no connection counters, so
// a trace from it cannot say which server round robin picks next. Without -n, ipvsadm prints names: a server
// printed with a host name keeps it and has no address, a port printed as a service name is read back where the
// name tells it (see Printed).
func ParseList(text string) (*State, error) {
	st := &State{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		f := strings.Fields(line)
		switch {
		case len(f) == 0, strings.HasPrefix(strings.TrimSpace(line), "IP Virtual Server version"):
			continue
		case f[0] == "Prot":
			// The column header says which listing this is: the default one has "Scheduler Flags"; --stats,
			// --rate, --thresholds and --persistent-conn print counters where it prints schedulers and weights.
			if len(f) < 3 || f[2] != "Scheduler" {
				return nil, fmt.Errorf("ipvsadm line %d %q: this listing (--stats, --rate, --thresholds or --persistent-conn) shows counters, not schedulers and weights; paste `ipvsadm -Ln`", n, line)
			}
			continue
		case f[0] == "->" && len(f) >= 2 && f[1] == "RemoteAddress:Port":
			continue
		case f[0] == "->":
			if len(st.Services) == 0 || len(f) < 6 {
				return nil, fmt.Errorf("ipvsadm line %d %q: a real server line wants a virtual server before it and 5 fields", n, line)
			}
			addr, port, printed, err := readAddrPort(f[1], realServerWidth)
			if err != nil {
				return nil, fmt.Errorf("ipvsadm line %d: %v", n, err)
			}
			if !forwardNames[f[2]] {
				return nil, fmt.Errorf("ipvsadm line %d %q: forwarding method %q: want Masq, Local, Tunnel or Route (is this `ipvsadm -Ln` with its default columns?)", n, line, f[2])
			}
			var nums [3]int
			for i := range nums {
				if nums[i], err = strconv.Atoi(f[3+i]); err != nil || nums[i] < 0 {
					return nil, fmt.Errorf("ipvsadm line %d %q: want WEIGHT ACTIVECONN INACTCONN numbers", n, line)
				}
			}
			v := &st.Services[len(st.Services)-1]
			v.RealServers = append(v.RealServers, RealServer{Address: addr, Port: port, Forward: f[2],
				Weight: nums[0], ActiveConns: nums[1], InactConns: nums[2], Printed: printed})
			continue
		}
		v, err := readVirtualServer(f)
		if err != nil {
			return nil, fmt.Errorf("ipvsadm line %d %q: %v", n, line, err)
		}
		st.Services = append(st.Services, v)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(st.Services) == 0 {
		return nil, fmt.Errorf("no virtual servers in the ipvsadm listing")
	}
	return st, nil
}

// forwardNames are the forwarding methods ipvsadm prints (fwd_name in ipvsadm.c).
var forwardNames = map[string]bool{"Masq": true, "Local": true, "Tunnel": true, "Route": true}

// protocols are the protocols of the virtual servers ipvsadm prints.
var protocols = map[string]bool{"TCP": true, "UDP": true, "SCTP": true, "FWM": true}

// readVirtualServer reads a virtual server line: "TCP  10.96.0.1:443 rr persistent 10800", "FWM  100 IPv6 wrr",
// "TCP  kubernetes.default.svc.clust rr" (a name cut at ipvsadm's width).
func readVirtualServer(f []string) (VirtualServer, error) {
	if len(f) < 3 || !protocols[f[0]] {
		return VirtualServer{}, fmt.Errorf("want PROTO ADDRESS:PORT SCHEDULER (TCP, UDP, SCTP or FWM)")
	}
	v := VirtualServer{Protocol: f[0], FromListing: true}
	rest := f[2:]
	if f[0] == "FWM" {
		m, err := strconv.ParseUint(f[1], 0, 32)
		if err != nil || m == 0 {
			return v, fmt.Errorf("firewall mark %q", f[1])
		}
		v.FWMark = uint32(m)
		if rest[0] == "IPv6" {
			rest = rest[1:]
		}
	} else {
		// "PROTO  NAME" is cut at serviceLineWidth characters, two spaces after the protocol.
		addr, port, printed, err := readAddrPort(f[1], serviceLineWidth-len(f[0])-2)
		if err != nil {
			return v, err
		}
		v.Address, v.Port, v.Printed = addr, port, printed
	}
	if len(rest) == 0 || !isSchedulerName(rest[0]) {
		return v, fmt.Errorf("want a scheduler after the address (rr, wrr, lc, sh, …): is this `ipvsadm -Ln` with its default columns?")
	}
	v.Scheduler = rest[0]
	for i := 1; i < len(rest); i++ {
		switch rest[i] {
		case "persistent", "-p": // ipvsadm -L prints "persistent N"; its save format (-S) writes "-p N"
			if i+1 >= len(rest) {
				return v, fmt.Errorf("%s wants a timeout", rest[i])
			}
			t, err := strconv.ParseUint(rest[i+1], 10, 32)
			if err != nil {
				return v, fmt.Errorf("persistent %q", rest[i+1])
			}
			v.Persistent, v.Timeout = true, uint32(t)
			i++
		case "mask", "-M":
			// An IPv4 netmask (255.255.255.0) or an IPv6 prefix length (64).
			if i+1 >= len(rest) {
				return v, fmt.Errorf("mask wants a netmask")
			}
			_, aerr := netip.ParseAddr(rest[i+1])
			_, nerr := strconv.ParseUint(rest[i+1], 10, 8)
			if aerr != nil && nerr != nil {
				return v, fmt.Errorf("persistence mask %q", rest[i+1])
			}
			v.PersistMask = rest[i+1]
			i++
		}
		// Other flags (scheduler flags in parentheses, "pe NAME", "ops") do not change a first packet's way.
	}
	return v, nil
}

// isSchedulerName says whether s can be a scheduler's name (ip_vs_rr: "rr", "wlc", "lblcr", "mh", "twos"): a
// listing with counters in its place is not the one ParseList reads.
func isSchedulerName(s string) bool {
	if s == "" || len(s) > 16 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// IsList says whether text looks like `ipvsadm -L[n]` output: its header, or (an excerpt) a virtual server line
// followed by a real server line.
func IsList(text string) bool {
	var first []string
	for l := range strings.SplitSeq(text, "\n") { // no slice of all the lines: an 8 MB dump is asked too
		f := strings.Fields(l)
		if len(f) == 0 || f[0] == "$" && first == nil {
			continue
		}
		if first == nil {
			if strings.HasPrefix(strings.TrimSpace(l), "IP Virtual Server version") || f[0] == "Prot" && len(f) >= 2 && f[1] == "LocalAddress:Port" {
				return true
			}
			if len(f) < 3 || !protocols[f[0]] {
				return false
			}
			first = f
			continue
		}
		return f[0] == "->"
	}
	return false
}

// EstimatorPeriod is how often the kernel folds its per-CPU IPVS counters into the ones netlink reports
// (ip_vs_est.c): a connection scheduled less than this long ago may be missing from Connections.
const EstimatorPeriod = 2 * time.Second

// SameCounters says whether two reads of a node's IPVS table show the same connection counters on every virtual
// and real server. Two reads an estimator period apart that agree show every connection made before the first.
func SameCounters(a, b *State) bool {
	if a == nil || b == nil {
		return a == b
	}
	if len(a.Services) != len(b.Services) {
		return false
	}
	for i := range a.Services {
		va, vb := &a.Services[i], &b.Services[i]
		if va.Name() != vb.Name() || va.Connections != vb.Connections || len(va.RealServers) != len(vb.RealServers) {
			return false
		}
		for j := range va.RealServers {
			if va.RealServers[j].Addr() != vb.RealServers[j].Addr() || va.RealServers[j].Connections != vb.RealServers[j].Connections {
				return false
			}
		}
	}
	return true
}
