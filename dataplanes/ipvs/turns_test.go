package ipvs

import (
	"net/netip"
	"slices"
	"testing"
)

// rr's position from the counters: the kernel's ip_vs_rr takes servers in list order from the head, so the
// counters of an unchanged list read k+1 … k+1, k … k, and the first k is next.
func TestRRTurns(t *testing.T) {
	for _, tc := range []struct {
		name    string
		weights []int
		counts  []uint32
		total   uint32 // the service's own counter
		want    []int  // per available server; nil: cannot tell
	}{
		{"fresh service: the head is next", []int{1, 1, 1}, []uint32{0, 0, 0}, 0, []int{1, 2, 3}},
		{"one connection made", []int{1, 1, 1}, []uint32{1, 0, 0}, 1, []int{3, 1, 2}},
		{"two made", []int{1, 1, 1}, []uint32{1, 1, 0}, 2, []int{2, 3, 1}},
		{"two full rounds", []int{1, 1, 1}, []uint32{2, 2, 2}, 6, []int{1, 2, 3}},
		{"a server added since (counts not a rotation)", []int{1, 1, 1}, []uint32{0, 3, 3}, 6, nil},
		{"counts of a removed server in the total", []int{1, 1}, []uint32{2, 2}, 6, nil},
		{"a gap of two", []int{1, 1, 1}, []uint32{3, 1, 1}, 5, nil},
		{"k+1 after k", []int{1, 1, 1}, []uint32{1, 0, 1}, 2, nil},
		{"a drained server (weight 0) breaks the count", []int{1, 0, 1}, []uint32{1, 0, 0}, 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := &VirtualServer{Protocol: "TCP", Scheduler: "rr", Connections: tc.total}
			for i, w := range tc.weights {
				v.RealServers = append(v.RealServers, RealServer{Address: netip.AddrFrom4([4]byte{10, 244, 0, byte(i + 2)}), Port: 8080, Forward: "Masq", Weight: w, Connections: tc.counts[i]})
			}
			_, _, _, got := choices(v)
			if !slices.Equal(got, tc.want) {
				t.Errorf("turns %v, want %v", got, tc.want)
			}
		})
	}
}
