package netstate

import (
	"net/netip"
	"os"
	"strings"
	"testing"
)

// FuzzIPSetList feeds `ipset list` text to the reader: nothing may panic, every set read has a name and a type
// Match can read, a set said to be complete shows as many members as it says it has, and Match runs on them.
func FuzzIPSetList(f *testing.F) {
	f.Add(ipsetListWhole)
	if b, err := os.ReadFile("testdata/ipset-list-cut.txt"); err == nil {
		f.Add(string(b))
	}
	f.Add("$ ipset list -t\nName: A\nType: hash:ip\nNumber of entries: 3\n\nName: B\nType: bitmap:port\nHeader: range 0-65535\nMembers:\n30000-30010\n")
	f.Add("Name: N\nType: hash:net\nMembers:\n10.0.0.0/8 nomatch\n10.1.0.0/16 timeout 5\n10.2.0.")
	f.Fuzz(func(t *testing.T, text string) {
		sets, err := ParseIPSetList(text)
		if err != nil {
			return
		}
		if !IsIPSetList(text) {
			t.Fatalf("read as ipset list, but IsIPSetList says it is not")
		}
		p := SetPacket{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.96.0.10"), Sport: 1, Dport: 53, Proto: "udp"}
		for _, s := range sets {
			if s.Name == "" || !strings.Contains(s.Type, ":") || strings.ContainsAny(s.Name+s.Type, " \t\n") {
				t.Fatalf("set %q type %q", s.Name, s.Type)
			}
			for _, m := range s.Members {
				if m == "" || strings.ContainsAny(strings.TrimSuffix(m, " nomatch"), " \t\n") {
					t.Fatalf("set %s: member %q", s.Name, m)
				}
			}
			s.Match("dst,dst,src", p)
			_ = s.Complete()
		}
	})
}
