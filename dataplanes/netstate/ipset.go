package netstate

import (
	"bufio"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// IPSet is one ipset as `ipset save` prints it. kube-proxy's IPVS mode keeps its Service addresses and
// NodePorts in sets like these, and its iptables rules test them with `-m set --match-set NAME dst,dst`.
type IPSet struct {
	Name string `json:"name"`
	Type string `json:"type"` // hash:ip,port, bitmap:port, …
	// Options are the rest of the create line (family inet hashsize 1024 maxelem 65536 …).
	Options string `json:"options,omitempty"`
	// Members are the add lines' entries as written: "30080", "10.96.0.10,tcp:80", "10.244.1.2,tcp:80,10.244.1.2".
	Members []string `json:"members,omitempty"`
	// Incomplete says why Members is not the whole set ("" when it is): a pasted `ipset list` cut short, or
	// one that shows no members (see Complete).
	Incomplete string `json:"incomplete,omitempty"`
}

// ParseIPSetSave reads `ipset save` output.
func ParseIPSetSave(text string) ([]IPSet, error) {
	var sets []IPSet
	index := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	n := 0
	for sc.Scan() {
		n++
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "create":
			if len(f) < 3 {
				return nil, fmt.Errorf("ipset save line %d: %q: want create NAME TYPE", n, sc.Text())
			}
			index[f[1]] = len(sets)
			sets = append(sets, IPSet{Name: f[1], Type: f[2], Options: strings.Join(f[3:], " ")})
		case "add":
			if len(f) < 3 {
				return nil, fmt.Errorf("ipset save line %d: %q: want add NAME ENTRY", n, sc.Text())
			}
			i, ok := index[f[1]]
			if !ok {
				return nil, fmt.Errorf("ipset save line %d: set %s has no create line", n, f[1])
			}
			sets[i].Members = append(sets[i].Members, f[2])
		default:
			return nil, fmt.Errorf("ipset save line %d: %q: want create or add", n, sc.Text())
		}
	}
	return sets, sc.Err()
}

// IPSet finds a set by name.
func (s *State) IPSet(name string) (*IPSet, bool) {
	for i := range s.IPSets {
		if s.IPSets[i].Name == name {
			return &s.IPSets[i], true
		}
	}
	return nil, false
}

// SetPacket is what an ipset match reads from a packet.
type SetPacket struct {
	Src, Dst     netip.Addr
	Sport, Dport uint16
	Proto        string // tcp, udp, sctp
}

// Match tells whether the packet is in the set, as `-m set --match-set NAME DIRS` tests it: DIRS says, per
// dimension of the set's type, whether that dimension comes from the source or the destination ("dst,dst" on a
// hash:ip,port set is the destination address and the destination port). The string describes what was
// looked up, for the reader.
func (set *IPSet) Match(dirs string, p SetPacket) (bool, string) {
	_, dims, _ := strings.Cut(set.Type, ":") // hash:ip,port → ip,port; bitmap:port → port
	kinds := strings.Split(dims, ",")
	sides := strings.Split(dirs, ",")
	var key []string
	var tests []func(member string) bool
	for i, kind := range kinds {
		side := "src"
		if i < len(sides) {
			side = sides[i]
		}
		ip, port := p.Src, p.Sport
		if side == "dst" {
			ip, port = p.Dst, p.Dport
		}
		switch kind {
		case "ip":
			key = append(key, ip.String())
			tests = append(tests, func(m string) bool { a, err := netip.ParseAddr(m); return err == nil && a == ip })
		case "net":
			key = append(key, ip.String())
			tests = append(tests, func(m string) bool { return prefixContains(m, ip) })
		case "port":
			key = append(key, fmt.Sprintf("%s:%d", p.Proto, port))
			tests = append(tests, func(m string) bool { return portMember(m, p.Proto, port) })
		default:
			return false, fmt.Sprintf("ipset type %s is not evaluated", set.Type)
		}
	}
	what := strings.Join(key, ",")
	for _, m := range set.Members {
		parts := strings.Split(m, ",")
		if len(parts) != len(tests) {
			continue
		}
		ok := true
		for i, test := range tests {
			if !test(parts[i]) {
				ok = false
				break
			}
		}
		if ok {
			return true, what
		}
	}
	return false, what
}

// portMember matches a port entry: "30080" (bitmap:port: any protocol with ports) or "tcp:80" (hash types).
// A port range "30000-30100" matches any port inside it.
func portMember(m, proto string, port uint16) bool {
	if p, n, ok := strings.Cut(m, ":"); ok {
		if !strings.EqualFold(p, proto) {
			return false
		}
		m = n
	}
	lo, hi, isRange := strings.Cut(m, "-")
	if !isRange {
		hi = lo
	}
	l, err1 := strconv.ParseUint(lo, 10, 16)
	h, err2 := strconv.ParseUint(hi, 10, 16)
	return err1 == nil && err2 == nil && uint64(port) >= l && uint64(port) <= h
}

func prefixContains(m string, ip netip.Addr) bool {
	if !strings.Contains(m, "/") {
		a, err := netip.ParseAddr(m)
		return err == nil && a == ip
	}
	p, err := netip.ParsePrefix(m)
	return err == nil && p.Contains(ip)
}
