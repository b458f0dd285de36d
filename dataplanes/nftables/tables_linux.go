package nftables

import (
	"encoding/binary"
	"fmt"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// nfTable names one nf_tables table.
type nfTable struct {
	Family string // ip, ip6, inet, arp, bridge, netdev
	Name   string
}

// nfTables lists the namespace's nf_tables tables with one netlink dump. `nft list tables` would do, but nft
// 1.0 fetches every chain and rule of the ruleset first: seconds on a node with thousands of Services.
func nfTables() ([]nfTable, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("netlink bind: %w", err)
	}
	// nlmsghdr + nfgenmsg{family AF_UNSPEC (all), version 0, res_id 0}.
	req := make([]byte, unix.NLMSG_HDRLEN+4)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_GETTABLE)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	binary.NativeEndian.PutUint32(req[8:], 1) // sequence
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("netlink send: %w", err)
	}
	var tables []nfTable
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return nil, fmt.Errorf("netlink receive: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return nil, fmt.Errorf("netlink: %w", err)
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return tables, nil
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if errno := int32(binary.NativeEndian.Uint32(m.Data)); errno != 0 {
						return nil, fmt.Errorf("listing nf_tables tables: %w", unix.Errno(-errno))
					}
				}
				return tables, nil
			}
			if len(m.Data) < 4 {
				continue
			}
			t := nfTable{Family: familyName(m.Data[0]), Name: tableName(m.Data[4:])}
			if t.Name != "" {
				tables = append(tables, t)
			}
		}
	}
}

// tableName finds NFTA_TABLE_NAME among a table message's attributes (after its nfgenmsg).
func tableName(b []byte) string {
	for len(b) >= unix.SizeofNlAttr {
		l := int(binary.NativeEndian.Uint16(b[0:]))
		typ := binary.NativeEndian.Uint16(b[2:]) &^ (unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
		if l < unix.SizeofNlAttr || l > len(b) {
			return ""
		}
		if typ == unix.NFTA_TABLE_NAME {
			return strings.TrimRight(string(b[unix.SizeofNlAttr:l]), "\x00")
		}
		b = b[min(len(b), (l+unix.NLA_ALIGNTO-1)&^(unix.NLA_ALIGNTO-1)):]
	}
	return ""
}

func familyName(f byte) string {
	switch f {
	case unix.NFPROTO_IPV4:
		return "ip"
	case unix.NFPROTO_IPV6:
		return "ip6"
	case unix.NFPROTO_INET:
		return "inet"
	case unix.NFPROTO_ARP:
		return "arp"
	case unix.NFPROTO_BRIDGE:
		return "bridge"
	case unix.NFPROTO_NETDEV:
		return "netdev"
	}
	return fmt.Sprint(f)
}
