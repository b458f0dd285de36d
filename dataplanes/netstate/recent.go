package netstate

import (
	"net/netip"
	"strconv"
	"strings"
)

// RecentAge is how many seconds ago src was last seen in the xt_recent list name; ok is false when the list
// does not hold src or the clock is unknown. /proc/net/xt_recent lines read
// `src=172.18.0.1 ttl: 64 last_seen: 4295016537 oldest_pkt: 1 4295016537`.
func (s *State) RecentAge(name string, src netip.Addr) (float64, bool) {
	lines, ok := s.Recent[name]
	if !ok {
		return 0, false
	}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != "src="+src.String() {
			continue
		}
		for i := 0; i+1 < len(f); i++ {
			if f[i] != "last_seen:" {
				continue
			}
			seen, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil || s.HZ == 0 || s.Jiffies == 0 {
				return 0, false
			}
			if seen > s.Jiffies {
				return 0, true
			}
			return float64(s.Jiffies-seen) / float64(s.HZ), true
		}
	}
	return 0, false
}

// HasRecent says whether the xt_recent list exists in the state (it is created with the first rule that uses it).
func (s *State) HasRecent(name string) bool { _, ok := s.Recent[name]; return ok }
