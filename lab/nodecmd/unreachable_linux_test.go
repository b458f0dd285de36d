package nodecmd

import (
	"encoding/hex"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/k8sguide/k8sguide/internal/netnstest"
)

// ciliumNoService is the IP packet of real Cilium 1.20.2's no-backend reply on a kind lab (tcpdump -xx on the
// Docker host's bridge port of node 172.18.0.4, after `curl 172.18.0.4:32003` from source port 45679 with the
// Service scaled to 0): the reply quotes the SYN's IP header and first 8 bytes, and the frame goes on with 32
// more bytes of the SYN that Cilium could not trim, past the IP total length (56).
const ciliumNoService = "45000038000000004001229cac120004ac1200010303b3ae00000000" +
	"4500003ced6d40004006f524ac120001ac120004b26f7d03d5f543e5" +
	"00000000a002faf058580000020405b40402080ac186d4f600000000010303 0a"

func TestUnreachableFor(t *testing.T) {
	pkt, err := hex.DecodeString(strings.ReplaceAll(ciliumNoService, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	dst := netip.MustParseAddrPort("172.18.0.4:32003")
	for _, c := range []struct {
		pkt   []byte
		dst   netip.AddrPort
		sport uint16
		want  string
	}{
		{pkt, dst, 45679, "ICMP port unreachable from 172.18.0.4"},
		{pkt, dst, 0, "ICMP port unreachable from 172.18.0.4"},
		{pkt, dst, 45680, ""},
		{pkt, netip.MustParseAddrPort("172.18.0.4:32004"), 45679, ""},
		{pkt, netip.MustParseAddrPort("172.18.0.3:32003"), 45679, ""},
		{pkt[:40], dst, 45679, ""},                         // cut inside the quoted header
		{pkt[:20], dst, 45679, ""},                         // no ICMP at all
		{append([]byte{0x60}, pkt[1:]...), dst, 45679, ""}, // not IPv4
	} {
		if got := unreachableFor(c.pkt, c.dst, c.sport); got != c.want {
			t.Errorf("unreachableFor(%d bytes, %s, %d) = %q, want %q", len(c.pkt), c.dst, c.sport, got, c.want)
		}
	}
}

// TestWatchUnreachable has the kernel answer a connection with an ICMP port unreachable (an nft reject on the
// way out, delivered back over lo) and checks that the watch reports it for that flow, and nothing for a flow
// the kernel answers with a reset, in a namespace of its own.
func TestWatchUnreachable(t *testing.T) {
	if netnstest.Inside() {
		watchUnreachableInThisNetns(t)
		return
	}
	netnstest.Run(t, "kgnc-unreach", "nft")
}

func watchUnreachableInThisNetns(t *testing.T) {
	for _, argv := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"nft", "add table ip t; add chain ip t out { type filter hook output priority 0; }; add rule ip t out ip daddr 127.0.0.7 tcp dport 80 reject with icmp type port-unreachable"},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", argv, err, out)
		}
	}
	dial := func(dst string, sport int) (string, error) {
		done := watchUnreachable(netip.MustParseAddrPort(dst), uint16(sport))
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sport}, Timeout: 2 * time.Second}
		c, err := d.Dial("tcp4", dst)
		if err == nil {
			c.Close()
		}
		return done(err != nil), err
	}
	got, err := dial("127.0.0.7:80", 41000)
	if err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("the rejected connection: %v, want refused", err)
	}
	if !strings.HasPrefix(got, "ICMP port unreachable from 127.0.0.") || !strings.HasSuffix(got, " on lo") {
		t.Errorf("the rejected connection: the watch saw %q, want the ICMP port unreachable on lo", got)
	}
	// A closed port with no rule: a reset, no ICMP error.
	if got, err := dial("127.0.0.7:81", 41001); err == nil || got != "" {
		t.Errorf("the reset connection: %v, the watch saw %q; want refused and nothing seen", err, got)
	}
}
