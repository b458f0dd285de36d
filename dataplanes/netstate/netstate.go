// Package netstate holds what a trace needs to know about a node's own network: its addresses, its routing
// tables (including `table local`, which decides addrtype LOCAL and fib type local), sysctls, conntrack
// entries, xt_recent lists and ipsets. It is plain data, collected on the node and read anywhere.
package netstate

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"sort"
	"strings"
)

// Address is one IPv4 address on an interface.
type Address struct {
	Dev    string       `json:"dev"`
	Prefix netip.Prefix `json:"prefix"` // 172.18.0.3/16
	Scope  string       `json:"scope,omitempty"`
}

// Route is one route of any table, as `ip -j route show table all` reports it.
type Route struct {
	Table   string       `json:"table,omitempty"` // "" is main
	Type    string       `json:"type,omitempty"`  // "" is unicast; local, broadcast, unreachable, …
	Dst     netip.Prefix `json:"dst"`
	Dev     string       `json:"dev,omitempty"`
	Gateway netip.Addr   `json:"gateway,omitzero"`
	PrefSrc netip.Addr   `json:"prefsrc,omitzero"`
	Scope   string       `json:"scope,omitempty"`
	Metric  int          `json:"metric,omitempty"`
}

// State is a node's network as a trace sees it.
type State struct {
	Addresses []Address `json:"addresses"`
	Routes    []Route   `json:"routes"`
	// Sysctls by dotted name (net.ipv4.ip_forward).
	Sysctls map[string]string `json:"sysctls,omitempty"`
	// Conntrack holds the conntrack table as `conntrack -L` prints it, one entry per line.
	Conntrack []string `json:"conntrack,omitempty"`
	// Recent holds the xt_recent lists (/proc/net/xt_recent/NAME), by list name.
	Recent map[string][]string `json:"recent,omitempty"`
	// Jiffies is the kernel's clock when the lists were read (the lists' last_seen values are on it), and HZ
	// its ticks per second; both 0 when unknown.
	Jiffies uint64 `json:"jiffies,omitempty"`
	HZ      int    `json:"hz,omitempty"`
	// IPSets are the node's ipsets (read over netlink, members as `ipset save` prints them), which iptables
	// rules test with -m set.
	IPSets []IPSet `json:"ipsets,omitempty"`
	// OutAssumed says the routes were not read but assumed (a pasted dump: everything leaves by eth0), so the
	// interface a packet leaves by is not known to rules that test it.
	OutAssumed bool `json:"-"`
	// AddrsUnknown says the node's addresses were not given (a pasted dump without --local-addresses): an address
	// not known to be the node's may still be, so a rule testing it (addrtype LOCAL, fib daddr type local) is
	// not decided by the state.
	AddrsUnknown bool `json:"-"`
}

// ParseAddresses reads `ip -j addr show`.
func ParseAddresses(data []byte) ([]Address, error) {
	var links []struct {
		Ifname   string `json:"ifname"`
		AddrInfo []struct {
			Family    string `json:"family"`
			Local     string `json:"local"`
			Prefixlen int    `json:"prefixlen"`
			Scope     string `json:"scope"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal(data, &links); err != nil {
		return nil, fmt.Errorf("ip -j addr: %w", err)
	}
	var out []Address
	for _, l := range links {
		for _, a := range l.AddrInfo {
			if a.Family != "inet" {
				continue
			}
			ip, err := netip.ParseAddr(a.Local)
			if err != nil {
				return nil, fmt.Errorf("ip -j addr: %s: %w", l.Ifname, err)
			}
			out = append(out, Address{Dev: l.Ifname, Prefix: netip.PrefixFrom(ip, a.Prefixlen), Scope: a.Scope})
		}
	}
	return out, nil
}

// ParseRoutes reads `ip -4 -j route show table all`.
func ParseRoutes(data []byte) ([]Route, error) {
	var raw []struct {
		Type    string `json:"type"`
		Dst     string `json:"dst"`
		Gateway string `json:"gateway"`
		Dev     string `json:"dev"`
		Table   string `json:"table"`
		Scope   string `json:"scope"`
		Prefsrc string `json:"prefsrc"`
		Metric  int    `json:"metric"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("ip -j route: %w", err)
	}
	var out []Route
	for _, r := range raw {
		var dst netip.Prefix
		switch {
		case r.Dst == "default":
			dst = netip.MustParsePrefix("0.0.0.0/0")
		case strings.Contains(r.Dst, "/"):
			p, err := netip.ParsePrefix(r.Dst)
			if err != nil {
				continue
			}
			dst = p
		default:
			a, err := netip.ParseAddr(r.Dst)
			if err != nil {
				continue
			}
			dst = netip.PrefixFrom(a, a.BitLen())
		}
		if !dst.Addr().Is4() {
			continue
		}
		rt := Route{Table: r.Table, Type: r.Type, Dst: dst, Dev: r.Dev, Scope: r.Scope, Metric: r.Metric}
		if r.Table == "main" {
			rt.Table = ""
		}
		if r.Type == "unicast" {
			rt.Type = ""
		}
		rt.Gateway, _ = netip.ParseAddr(r.Gateway)
		rt.PrefSrc, _ = netip.ParseAddr(r.Prefsrc)
		out = append(out, rt)
	}
	return out, nil
}

// FromLocalAddresses builds the smallest state that answers "is this address local" for a node known only
// by its addresses (a raw rules dump with --local-addresses): each address is local, 127.0.0.0/8 too, and
// everything else is routed out of eth0 with the first address as source.
func FromLocalAddresses(addrs []netip.Addr) State {
	s := State{Routes: []Route{{Table: "local", Type: "local", Dst: netip.MustParsePrefix("127.0.0.0/8"), Dev: "lo"}}, OutAssumed: true}
	s.Sysctls = map[string]string{"net.ipv4.ip_forward": "1"}
	// The default route: a dump does not say where the node sends what is not its own; eth0 is assumed (and
	// the trace says so), not "no route".
	def := Route{Dst: netip.MustParsePrefix("0.0.0.0/0"), Dev: "eth0"}
	if len(addrs) > 0 {
		def.PrefSrc = addrs[0]
	}
	s.Routes = append(s.Routes, def)
	s.Addresses = append(s.Addresses, Address{Dev: "lo", Prefix: netip.MustParsePrefix("127.0.0.1/8")})
	for _, a := range addrs {
		s.Routes = append(s.Routes, Route{Table: "local", Type: "local", Dst: netip.PrefixFrom(a, 32), Dev: "eth0"})
		s.Addresses = append(s.Addresses, Address{Dev: "eth0", Prefix: netip.PrefixFrom(a, 32)})
	}
	return s
}

// IPVSDevice is where kube-proxy's IPVS mode binds every Service address, to make it local to the node.
const IPVSDevice = "kube-ipvs0"

// AddServiceAddresses makes addrs local as kube-proxy's IPVS mode does: bound on kube-ipvs0. A dump's IPVS
// virtual servers say so of their addresses; the node's own addresses stay told apart from them.
func (s *State) AddServiceAddresses(addrs []netip.Addr) {
	for _, a := range addrs {
		if s.IsLocal(a) {
			continue
		}
		s.Routes = append(s.Routes, Route{Table: "local", Type: "local", Dst: netip.PrefixFrom(a, 32), Dev: IPVSDevice})
		s.Addresses = append(s.Addresses, Address{Dev: IPVSDevice, Prefix: netip.PrefixFrom(a, 32)})
	}
}

// DeviceOf is the device that holds ip as an address of its own ("" when none does).
func (s *State) DeviceOf(ip netip.Addr) string {
	for _, a := range s.Addresses {
		if a.Prefix.Addr() == ip {
			return a.Dev
		}
	}
	return ""
}

// LocalType returns the type of the local-table route covering ip ("local", "broadcast", …), or "" when the
// address is not in `table local`. This is what addrtype --dst-type and fib daddr type read.
func (s *State) LocalType(ip netip.Addr) string {
	best := -1
	typ := ""
	for _, r := range s.Routes {
		if r.Table != "local" || !r.Dst.Contains(ip) {
			continue
		}
		if r.Dst.Bits() > best {
			best, typ = r.Dst.Bits(), r.Type
		}
	}
	return typ
}

// LocalFact is the question whether ip is one of the node's addresses, when they were not given (AddrsUnknown):
// the same words wherever a walk meets it, so that every rule that tests it (iptables' addrtype, nft's fib) asks
// the same fact.
func LocalFact(ip netip.Addr) string {
	return fmt.Sprintf("whether %s is one of this node's addresses: the input does not say; --local-addresses tells", ip)
}

// LocalUnknown says whether the state cannot tell if ip is one of the node's addresses.
func (s *State) LocalUnknown(ip netip.Addr) bool {
	return s.AddrsUnknown && s.LocalType(ip) == "" && ip.IsGlobalUnicast()
}

// IsLocal says whether ip is one of the node's own addresses (addrtype LOCAL).
func (s *State) IsLocal(ip netip.Addr) bool { return s.LocalType(ip) == "local" }

// Lookup is the main-table route for dst (longest prefix, then lowest metric); ok is false when there is none.
func (s *State) Lookup(dst netip.Addr) (Route, bool) {
	var best Route
	found := false
	for _, r := range s.Routes {
		if r.Table != "" || r.Type != "" && r.Type != "unicast" || !r.Dst.Contains(dst) {
			continue
		}
		if !found || r.Dst.Bits() > best.Dst.Bits() || r.Dst.Bits() == best.Dst.Bits() && r.Metric < best.Metric {
			best, found = r, true
		}
	}
	return best, found
}

// SourceFor is the address the kernel picks as the source of a packet leaving through route r: the route's
// preferred source, else an address of the outgoing interface whose subnet holds the next hop, else the
// interface's first global address (inet_select_addr). MASQUERADE uses the same choice.
func (s *State) SourceFor(r Route, dst netip.Addr) netip.Addr {
	if r.PrefSrc.IsValid() {
		return r.PrefSrc
	}
	next := dst
	if r.Gateway.IsValid() {
		next = r.Gateway
	}
	var first netip.Addr
	for _, a := range s.Addresses {
		if a.Dev != r.Dev || a.Scope == "host" {
			continue
		}
		if a.Prefix.Contains(next) {
			return a.Prefix.Addr()
		}
		if !first.IsValid() {
			first = a.Prefix.Addr()
		}
	}
	return first
}

// DevOf names the interface that owns ip, "" when no interface does.
func (s *State) DevOf(ip netip.Addr) string {
	for _, a := range s.Addresses {
		if a.Prefix.Addr() == ip {
			return a.Dev
		}
	}
	return ""
}

// PrimaryAddresses are the first address of each interface other than lo: what kube-proxy's
// --nodeport-addresses=primary selects and what "the node IP" means for a reader.
func (s *State) PrimaryAddresses() []netip.Addr {
	seen := map[string]bool{}
	var out []netip.Addr
	for _, a := range s.Addresses {
		if a.Dev == "lo" || seen[a.Dev] {
			continue
		}
		seen[a.Dev] = true
		out = append(out, a.Prefix.Addr())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out
}
