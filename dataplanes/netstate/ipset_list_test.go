package netstate

import (
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
)

// A whole `ipset list` of the sets kube-proxy's IPVS mode makes (ipset 7.x: with "Number of entries"), one of
// each type it uses.
const ipsetListWhole = `Name: KUBE-CLUSTER-IP
Type: hash:ip,port
Revision: 5
Header: family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0xae74a50a
Size in memory: 392
References: 2
Number of entries: 2
Members:
10.96.0.1,tcp:443
10.96.0.10,udp:53

Name: KUBE-LOOP-BACK
Type: hash:ip,port,ip
Revision: 6
Header: family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0xea67dadf
Size in memory: 296
References: 1
Number of entries: 1
Members:
10.244.1.2,tcp:80,10.244.1.2

Name: KUBE-NODE-PORT-TCP
Type: bitmap:port
Revision: 3
Header: range 0-65535
Size in memory: 8268
References: 1
Number of entries: 1
Members:
30080

Name: KUBE-NODE-PORT-LOCAL-TCP
Type: bitmap:port
Revision: 3
Header: range 0-65535
Size in memory: 8264
References: 0
Number of entries: 0
Members:

Name: KUBE-LOAD-BALANCER-SOURCE-CIDR
Type: hash:ip,port,net
Revision: 7
Header: family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0x6b7f4e94
Size in memory: 504
References: 1
Number of entries: 1
Members:
172.18.0.100,tcp:80,10.0.0.0/8

Name: SOME-NETS
Type: hash:net
Revision: 7
Header: family inet hashsize 1024 maxelem 65536 timeout 600 bucketsize 12 initval 0x1
Size in memory: 504
References: 0
Number of entries: 2
Members:
10.0.0.0/8 timeout 580
192.168.7.0/24 timeout 12
`

func TestParseIPSetList(t *testing.T) {
	sets, err := ParseIPSetList(ipsetListWhole)
	if err != nil {
		t.Fatal(err)
	}
	st := State{IPSets: sets}
	pkt := func(dst string, dport uint16, proto string) SetPacket {
		return SetPacket{Src: netip.MustParseAddr("10.0.0.7"), Sport: 40000, Dst: netip.MustParseAddr(dst), Dport: dport, Proto: proto}
	}
	for _, tc := range []struct {
		set, dirs string
		p         SetPacket
		want      bool
	}{
		{"KUBE-CLUSTER-IP", "dst,dst", pkt("10.96.0.10", 53, "udp"), true},
		{"KUBE-CLUSTER-IP", "dst,dst", pkt("10.96.0.10", 53, "tcp"), false},
		{"KUBE-LOOP-BACK", "dst,dst,src", SetPacket{Src: netip.MustParseAddr("10.244.1.2"), Dst: netip.MustParseAddr("10.244.1.2"), Dport: 80, Proto: "tcp"}, true},
		{"KUBE-NODE-PORT-TCP", "dst", pkt("172.18.0.2", 30080, "tcp"), true},
		{"KUBE-NODE-PORT-LOCAL-TCP", "dst", pkt("172.18.0.2", 30080, "tcp"), false},
		{"KUBE-LOAD-BALANCER-SOURCE-CIDR", "dst,dst,src", pkt("172.18.0.100", 80, "tcp"), true},
		// An entry's options (timeout 580) are not part of the entry.
		{"SOME-NETS", "src", pkt("1.1.1.1", 1, "tcp"), true},
	} {
		set, ok := st.IPSet(tc.set)
		if !ok {
			t.Fatalf("no set %s in %d sets", tc.set, len(sets))
		}
		if !set.Complete() {
			t.Errorf("%s: incomplete (%s); the listing is whole", tc.set, set.Incomplete)
		}
		if got, what := set.Match(tc.dirs, tc.p); got != tc.want {
			t.Errorf("%s %s %s: %v, want %v", tc.set, tc.dirs, what, got, tc.want)
		}
	}
	if s, _ := st.IPSet("KUBE-NODE-PORT-TCP"); s.Type != "bitmap:port" || s.Options != "range 0-65535" {
		t.Errorf("KUBE-NODE-PORT-TCP: type %q options %q", s.Type, s.Options)
	}
	if !IsIPSetList(ipsetListWhole) || !IsIPSetList("$ ipset list\n"+ipsetListWhole) || IsIPSetList("create A hash:ip\n") {
		t.Error("IsIPSetList")
	}
	if !IsIPSetSave("$ ipset save\ncreate KUBE-CLUSTER-IP hash:ip,port family inet\n") || IsIPSetSave(ipsetListWhole) {
		t.Error("IsIPSetSave")
	}
}

// A listing cut short: the set's members that are not shown make a miss unknown, and the line the cut may have
// gone through is not taken for a member.
func TestParseIPSetListCut(t *testing.T) {
	const head = "Name: KUBE-CLUSTER-IP\nType: hash:ip,port\nHeader: family inet hashsize 1024 maxelem 65536\n"
	for _, tc := range []struct {
		name, text string
		members    []string
		complete   bool
	}{
		{"whole", head + "Number of entries: 2\nMembers:\n10.96.0.1,tcp:443\n10.96.0.10,udp:53\n", []string{"10.96.0.1,tcp:443", "10.96.0.10,udp:53"}, true},
		{"whole, no count (old ipset), another set after it", head + "Members:\n10.96.0.1,tcp:443\n\nName: B\nType: bitmap:port\nNumber of entries: 0\nMembers:\n", []string{"10.96.0.1,tcp:443"}, true},
		{"cut at a line's end: the last line may be cut", head + "Number of entries: 3\nMembers:\n10.96.0.1,tcp:443\n10.96.0.10,udp:53\n", []string{"10.96.0.1,tcp:443"}, false},
		{"cut inside a line", head + "Number of entries: 3\nMembers:\n10.96.0.1,tcp:443\n10.96.0.10,udp:5", []string{"10.96.0.1,tcp:443"}, false},
		{"no count, ends the paste", head + "Members:\n10.96.0.1,tcp:443\n10.96.0.10,udp:53\n", []string{"10.96.0.1,tcp:443", "10.96.0.10,udp:53"}, false},
		{"no count, ends inside a line", head + "Members:\n10.96.0.1,tcp:443\n10.96.0.10,udp:5", []string{"10.96.0.1,tcp:443"}, false},
		{"terse (-t): no members shown", head + "Number of entries: 2\n", nil, false},
		{"terse, empty set", head + "Number of entries: 0\n", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sets, err := ParseIPSetList(tc.text)
			if err != nil {
				t.Fatal(err)
			}
			s := sets[0]
			if !slices.Equal(s.Members, tc.members) || s.Complete() != tc.complete {
				t.Errorf("members %q complete %v (%s); want %q complete %v", s.Members, s.Complete(), s.Incomplete, tc.members, tc.complete)
			}
		})
	}
}

// A real paste (corpus 12, sealos issue 2108, the output after its prompt line): KUBE-CLUSTER-IP says 143 entries
// and the excerpt shows 50. kube-dns's member is among those shown; a miss is unknown.
func TestParseIPSetListRealCut(t *testing.T) {
	b, err := os.ReadFile("testdata/ipset-list-cut.txt")
	if err != nil {
		t.Fatal(err)
	}
	sets, err := ParseIPSetList(string(b))
	if err != nil {
		t.Fatal(err)
	}
	if len(sets) != 1 || sets[0].Name != "KUBE-CLUSTER-IP" || sets[0].Type != "hash:ip,port" {
		t.Fatalf("sets %+v", sets)
	}
	s := sets[0]
	if s.Complete() || !strings.Contains(s.Incomplete, "49 of its 143") {
		t.Errorf("incomplete %q; want 49 of 143 shown (the 50th line may be cut)", s.Incomplete)
	}
	dns := SetPacket{Dst: netip.MustParseAddr("10.68.0.10"), Dport: 53, Proto: "udp"}
	if ok, _ := s.Match("dst,dst", dns); !ok {
		t.Error("10.68.0.10,udp:53 is listed")
	}
}

func TestParseIPSetListErrors(t *testing.T) {
	for _, text := range []string{
		"",
		"10.0.0.1\n",
		"Name: A\nMembers:\n1\n",          // no type
		"Name: A B\nType: hash:ip\n",      // a name with a space
		"Name: A\nType: hash ip\n",        // not METHOD:DIMENSIONS
		"Name: A\nType: hash:ip\nbogus\n", // not a header line
		"Name: A\nType: hash:ip\nNumber of entries: x\n",
	} {
		if _, err := ParseIPSetList(text); err == nil {
			t.Errorf("%q parsed", text)
		}
	}
}
