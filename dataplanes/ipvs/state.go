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
	// Connections is the kernel's count of connections scheduled so far (refreshed by its estimator every 2 s).
	Connections uint32       `json:"connections"`
	RealServers []RealServer `json:"realServers"`
	// FromListing is set when the server was read from `ipvsadm -Ln`, which sorts real servers for display
	// and shows no counters: its order is not the kernel's, and round robin's position cannot be told.
	FromListing bool `json:"fromListing,omitempty"`
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
}

// Addr is the virtual server's address and port.
func (v *VirtualServer) Addr() netip.AddrPort { return netip.AddrPortFrom(v.Address, v.Port) }

// Addr is the real server's address and port.
func (r *RealServer) Addr() netip.AddrPort { return netip.AddrPortFrom(r.Address, r.Port) }

// Name is the virtual server as ipvsadm names it: "TCP  172.18.0.3:30080 rr".
func (v *VirtualServer) Name() string {
	head := fmt.Sprintf("%s  %s", v.Protocol, v.Addr())
	if v.FWMark != 0 {
		head = fmt.Sprintf("FWM  %d", v.FWMark)
	}
	s := head + " " + v.Scheduler
	if v.Persistent {
		s += fmt.Sprintf(" persistent %d", v.Timeout)
	}
	return s
}

// Line is the real server as ipvsadm -Ln prints it.
func (r *RealServer) Line() string {
	return fmt.Sprintf("-> %s %s %d %d %d", r.Addr(), r.Forward, r.Weight, r.ActiveConns, r.InactConns)
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
		if v.FWMark == 0 && strings.EqualFold(v.Protocol, proto) && v.Address == dst && v.Port == port {
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

// ParseList reads `ipvsadm -Ln` (the default columns, not --stats or --rate): the virtual servers and their
// real servers, in the kernel's order. The listing has no connection counters, so a trace from it cannot say
// which server round robin picks next.
func ParseList(text string) (*State, error) {
	st := &State{}
	sc := bufio.NewScanner(strings.NewReader(text))
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(line, "IP Virtual Server") || f[0] == "Prot" || (f[0] == "->" && f[1] == "RemoteAddress:Port") {
			continue
		}
		if f[0] == "->" {
			if len(st.Services) == 0 || len(f) < 6 {
				return nil, fmt.Errorf("ipvsadm line %d %q: a real server line wants a virtual server before it and 5 fields", n, line)
			}
			a, err := netip.ParseAddrPort(f[1])
			if err != nil {
				return nil, fmt.Errorf("ipvsadm line %d: %v", n, err)
			}
			var nums [3]int
			for i := range nums {
				if nums[i], err = strconv.Atoi(f[3+i]); err != nil {
					return nil, fmt.Errorf("ipvsadm line %d %q: %v", n, line, err)
				}
			}
			v := &st.Services[len(st.Services)-1]
			v.RealServers = append(v.RealServers, RealServer{Address: a.Addr(), Port: a.Port(), Forward: f[2],
				Weight: nums[0], ActiveConns: nums[1], InactConns: nums[2]})
			continue
		}
		if len(f) < 3 {
			return nil, fmt.Errorf("ipvsadm line %d %q: want PROTO ADDRESS:PORT SCHEDULER", n, line)
		}
		v := VirtualServer{Protocol: f[0], Scheduler: f[2], FromListing: true}
		if f[0] == "FWM" {
			m, err := strconv.ParseUint(f[1], 0, 32)
			if err != nil {
				return nil, fmt.Errorf("ipvsadm line %d: firewall mark %q", n, f[1])
			}
			v.FWMark = uint32(m)
		} else {
			a, err := netip.ParseAddrPort(f[1])
			if err != nil {
				return nil, fmt.Errorf("ipvsadm line %d: %v", n, err)
			}
			v.Address, v.Port = a.Addr(), a.Port()
		}
		for i := 3; i < len(f); i++ {
			if f[i] == "persistent" && i+1 < len(f) {
				t, err := strconv.ParseUint(f[i+1], 10, 32)
				if err != nil {
					return nil, fmt.Errorf("ipvsadm line %d: persistent %q", n, f[i+1])
				}
				v.Persistent, v.Timeout = true, uint32(t)
				i++
			}
		}
		st.Services = append(st.Services, v)
	}
	if len(st.Services) == 0 {
		return nil, fmt.Errorf("no virtual servers in the ipvsadm listing")
	}
	return st, sc.Err()
}

// IsList says whether text looks like `ipvsadm -Ln` output.
func IsList(text string) bool {
	return strings.HasPrefix(strings.TrimSpace(text), "IP Virtual Server version")
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
