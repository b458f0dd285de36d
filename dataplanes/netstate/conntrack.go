package netstate

import (
	"net/netip"
	"strconv"
	"strings"
)

// Tuple is one direction of a conntrack entry.
type Tuple struct {
	Src, Dst     netip.Addr
	Sport, Dport uint16
}

// ConntrackEntry is one line of `conntrack -L`, parsed.
type ConntrackEntry struct {
	Line   string
	Proto  string
	State  string // TCP state (ESTABLISHED, TIME_WAIT, …); "" for udp
	Orig   Tuple
	Reply  Tuple
	Status []string // [ASSURED], [UNREPLIED]
}

// ParseConntrack parses one `conntrack -L` line; ok is false for lines that are not entries.
func ParseConntrack(line string) (ConntrackEntry, bool) {
	e := ConntrackEntry{Line: line}
	f := strings.Fields(line)
	if len(f) < 4 {
		return e, false
	}
	e.Proto = f[0]
	t := &e.Orig // the first tuple is the original direction, the second the reply
	srcs := 0
	for _, w := range f[1:] {
		if strings.HasPrefix(w, "[") {
			e.Status = append(e.Status, strings.Trim(w, "[]"))
			continue
		}
		k, v, ok := strings.Cut(w, "=")
		if !ok {
			if _, err := strconv.Atoi(w); err != nil && e.State == "" && strings.ToUpper(w) == w {
				e.State = w
			}
			continue
		}
		switch k {
		case "src":
			if srcs++; srcs == 2 {
				t = &e.Reply
			}
			t.Src, _ = netip.ParseAddr(v)
		case "dst":
			t.Dst, _ = netip.ParseAddr(v)
		case "sport":
			p, _ := strconv.Atoi(v)
			t.Sport = uint16(p)
		case "dport":
			p, _ := strconv.Atoi(v)
			t.Dport = uint16(p)
		}
	}
	return e, e.Orig.Src.IsValid() && e.Reply.Src.IsValid()
}

// Live says whether the entry still decides packets of its flow. A TCP SYN that meets a TIME_WAIT or CLOSE
// entry makes conntrack drop the old entry and start a new connection, so those do not count.
func (e ConntrackEntry) Live() bool {
	switch e.State {
	case "TIME_WAIT", "CLOSE":
		return false
	}
	return true
}

// FindConntrack returns the live entry whose original or reply tuple is the packet's, and the direction.
func (s *State) FindConntrack(proto string, t Tuple) (ConntrackEntry, string, bool) {
	for _, line := range s.Conntrack {
		e, ok := ParseConntrack(line)
		if !ok || e.Proto != proto || !e.Live() {
			continue
		}
		if e.Orig == t {
			return e, "original", true
		}
		if e.Reply == t {
			return e, "reply", true
		}
	}
	return ConntrackEntry{}, "", false
}
