package nodecmd

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// watchUnreachable watches this network namespace's interfaces for an ICMP destination unreachable that quotes
// the TCP flow from port sport (any port when 0) to dst, and done says what arrived ("" when nothing did). It
// looks where tcpdump looks, before the IP layer: a connection that timed out although the node's ICMP error
// reached this host is an error the IP layer did not take (Cilium's no-backend reply to a client whose SYN left
// with its checksum offload pending, see dataplanes/ebpf/datapath's Defines), which a dial alone cannot tell
// from a silent drop. done(failed) stops the watch (after a last moment for an error on its way in, when the
// connection failed). Without CAP_NET_RAW, or on any error, it watches nothing and done says "".
func watchUnreachable(dst netip.AddrPort, sport uint16) (done func(failed bool) string) {
	// ETH_P_ALL: a socket for ETH_P_IP alone is handed packets after a bridge port's rx handler, which takes
	// them into the bridge, and on the bridge's device they come after br_netfilter, which is where a reply the
	// IP layer will not take is dropped; every protocol's taps see the frame on the port first.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return func(bool) string { return "" }
	}
	// Only IPv4 ICMP type 3 reaches the socket (a SOCK_DGRAM packet socket's filter sees the IP header at 0),
	// so a busy host's other traffic is not copied to it.
	prog, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadExtension{Num: bpf.ExtProto},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.ETH_P_IP, SkipTrue: 6},
		bpf.LoadAbsolute{Off: 9, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.IPPROTO_ICMP, SkipTrue: 4},
		bpf.LoadMemShift{Off: 0},
		bpf.LoadIndirect{Off: 0, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: 3, SkipTrue: 1},
		bpf.RetConstant{Val: 512},
		bpf.RetConstant{Val: 0},
	})
	if err == nil {
		filter := make([]unix.SockFilter, len(prog))
		for i, in := range prog {
			filter[i] = unix.SockFilter{Code: in.Op, Jt: in.Jt, Jf: in.Jf, K: in.K}
		}
		err = unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]})
	}
	if err == nil {
		// The reader wakes this often to see whether it is done: what done adds to an answered connection.
		err = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 20_000})
	}
	if err != nil {
		unix.Close(fd)
		return func(bool) string { return "" }
	}
	var (
		mu     sync.Mutex
		stop   bool
		seen   string
		finish = make(chan struct{})
	)
	go func() {
		defer close(finish)
		buf := make([]byte, 512)
		for {
			mu.Lock()
			s := stop
			mu.Unlock()
			if s {
				return
			}
			n, from, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				continue
			}
			ll, ok := from.(*unix.SockaddrLinklayer)
			if !ok || ll.Pkttype == unix.PACKET_OUTGOING {
				continue
			}
			if what := unreachableFor(buf[:n], dst, sport); what != "" {
				if ifc, err := net.InterfaceByIndex(ll.Ifindex); err == nil {
					what += " on " + ifc.Name
				}
				mu.Lock()
				seen = what
				mu.Unlock()
				return
			}
		}
	}()
	return func(failed bool) string {
		if failed {
			// The error for a SYN comes back within a round trip; a last moment lets one already on its way
			// in be read.
			time.Sleep(50 * time.Millisecond)
		}
		mu.Lock()
		stop = true
		mu.Unlock()
		<-finish
		unix.Close(fd)
		return seen
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// unreachableFor says which ICMP destination unreachable pkt (an IPv4 packet) is, and from where, when it quotes
// a TCP packet from port sport (any when 0) to dst; "" for any other packet. The IP header's total length
// bounds the parse: the frame may carry more (Cilium's reply keeps bytes of the SYN it could not trim).
func unreachableFor(pkt []byte, dst netip.AddrPort, sport uint16) string {
	if len(pkt) < 20 || pkt[0]>>4 != 4 || pkt[9] != unix.IPPROTO_ICMP {
		return ""
	}
	if total := int(binary.BigEndian.Uint16(pkt[2:4])); total < len(pkt) {
		pkt = pkt[:total]
	}
	ihl := int(pkt[0]&0xf) * 4
	icmp := pkt[min(ihl, len(pkt)):]
	if len(icmp) < 8+20 || icmp[0] != 3 {
		return ""
	}
	inner := icmp[8:]
	innerIHL := int(inner[0]&0xf) * 4
	if inner[0]>>4 != 4 || inner[9] != unix.IPPROTO_TCP || len(inner) < innerIHL+4 {
		return ""
	}
	innerDst, _ := netip.AddrFromSlice(inner[16:20])
	ports := inner[innerIHL:]
	if innerDst != dst.Addr() || binary.BigEndian.Uint16(ports[2:4]) != dst.Port() ||
		sport != 0 && binary.BigEndian.Uint16(ports[0:2]) != sport {
		return ""
	}
	from, _ := netip.AddrFromSlice(pkt[12:16])
	return fmt.Sprintf("ICMP %s from %s", unreachableCode(icmp[1]), from)
}

// unreachableCode names an ICMP destination unreachable code as tcpdump does.
func unreachableCode(code byte) string {
	switch code {
	case 0:
		return "net unreachable"
	case 1:
		return "host unreachable"
	case 3:
		return "port unreachable"
	case 9:
		return "net administratively prohibited"
	case 10:
		return "host administratively prohibited"
	case 13:
		return "administratively prohibited"
	}
	return fmt.Sprintf("destination unreachable (code %d)", code)
}
