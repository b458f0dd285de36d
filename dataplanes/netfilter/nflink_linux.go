package netfilter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// KernelTables lists the nf_tables tables of the calling process's network namespace with one netlink dump.
// `nft list tables` would do, but nft 1.0 fetches every chain and rule of the ruleset first: seconds on a node
// with thousands of Services.
func KernelTables() ([]KernelTable, error) {
	var out []KernelTable
	err := dump(unix.NFT_MSG_GETTABLE, func(family byte, attrs []byte) {
		t := KernelTable{Family: familyName(family)}
		for typ, v := range attributes(attrs) {
			switch typ {
			case unix.NFTA_TABLE_NAME:
				t.Name = cstring(v)
			case nftaTableHandle:
				t.Handle = be64(v)
			}
		}
		if t.Name != "" {
			out = append(out, t)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("listing nf_tables tables: %w", err)
	}
	return out, nil
}

// tableHandles maps each nf_tables table ("FAMILY NAME") to its handle: chains name their table, not its handle.
func tableHandles() (map[string]int, error) {
	tables, err := KernelTables()
	if err != nil {
		return nil, err
	}
	handle := map[string]int{}
	for _, t := range tables {
		handle[t.Family+" "+t.Name] = t.Handle
	}
	return handle, nil
}

// KernelBaseChains lists the nf_tables base chains of the calling process's network namespace, with their
// tables' handles, in two netlink dumps (the chains name their table, not its handle).
func KernelBaseChains() ([]KernelChain, error) {
	handle, err := tableHandles()
	if err != nil {
		return nil, err
	}
	var out []KernelChain
	err = dump(unix.NFT_MSG_GETCHAIN, func(family byte, attrs []byte) {
		if c := parseChain(family, attrs); c.Hook >= 0 && c.Name != "" { // not a regular chain
			c.TableHandle = handle[c.Family+" "+c.Table]
			out = append(out, c)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("listing nf_tables chains: %w", err)
	}
	return out, nil
}

// KernelBaseChainsNamed is KernelBaseChains for the chains of family ip named ("TABLE/CHAIN") that exist, asked
// one by one: the dump of every chain that KernelBaseChains makes lists each of the tens of thousands of a
// node with thousands of Services.
func KernelBaseChainsNamed(names []string) ([]KernelChain, error) {
	handle, err := tableHandles()
	if err != nil {
		return nil, err
	}
	fd, err := socket()
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var out []KernelChain
	for i, name := range names {
		table, chain, _ := strings.Cut(name, "/")
		if _, ok := handle["ip "+table]; !ok {
			continue
		}
		var attrs []byte
		attrs = appendAttr(attrs, unix.NFTA_CHAIN_TABLE, append([]byte(table), 0))
		attrs = appendAttr(attrs, unix.NFTA_CHAIN_NAME, append([]byte(chain), 0))
		err := request(fd, unix.NFT_MSG_GETCHAIN, unix.NFPROTO_IPV4, 0, uint32(i+1), attrs, func(family byte, attrs []byte) {
			if c := parseChain(family, attrs); c.Hook >= 0 && c.Name != "" {
				c.TableHandle = handle[c.Family+" "+c.Table]
				out = append(out, c)
			}
		})
		if errors.Is(err, unix.ENOENT) {
			continue // iptables-nft makes a built-in chain when it first gets a rule
		}
		if err != nil {
			return nil, fmt.Errorf("reading nf_tables chain ip %s %s: %w", table, chain, err)
		}
	}
	return out, nil
}

// parseChain reads a chain's attributes; Hook is -1 for a regular chain.
func parseChain(family byte, attrs []byte) KernelChain {
	c := KernelChain{Family: familyName(family), Hook: -1}
	for typ, v := range attributes(attrs) {
		switch typ {
		case unix.NFTA_CHAIN_TABLE:
			c.Table = cstring(v)
		case unix.NFTA_CHAIN_NAME:
			c.Name = cstring(v)
		case unix.NFTA_CHAIN_HANDLE:
			c.Handle = be64(v)
		case unix.NFTA_CHAIN_HOOK:
			for ht, hv := range attributes(v) {
				switch {
				case ht == unix.NFTA_HOOK_HOOKNUM && len(hv) >= 4:
					c.Hook = int(binary.BigEndian.Uint32(hv))
				case ht == unix.NFTA_HOOK_PRIORITY && len(hv) >= 4:
					c.Priority = int(int32(binary.BigEndian.Uint32(hv)))
				}
			}
		}
	}
	return c
}

// appendAttr appends a netlink attribute, padded to NLA_ALIGNTO.
func appendAttr(b []byte, typ uint16, v []byte) []byte {
	l := unix.SizeofNlAttr + len(v)
	b = binary.NativeEndian.AppendUint16(b, uint16(l))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, v...)
	for l%unix.NLA_ALIGNTO != 0 {
		b, l = append(b, 0), l+1
	}
	return b
}

// nftaTableHandle is NFTA_TABLE_HANDLE (linux/netfilter/nf_tables.h, since Linux 4.16), which x/sys/unix lacks.
const nftaTableHandle = 4

// dump sends an nf_tables GET request with NLM_F_DUMP for every family and hands each answer's family and
// attributes (after its nfgenmsg) to each.
func dump(msg int, each func(family byte, attrs []byte)) error {
	fd, err := socket()
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return request(fd, msg, unix.AF_UNSPEC, unix.NLM_F_DUMP, 1, nil, each)
}

func socket() (int, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return -1, fmt.Errorf("netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("netlink bind: %w", err)
	}
	return fd, nil
}

// request sends an nf_tables GET request (flags: NLM_F_DUMP for all, 0 for one object named by attrs) for
// family and hands each answer's family and attributes (after its nfgenmsg) to each, until the dump's end or the
// one answer. The kernel's error (ENOENT: no such object) is returned as a unix.Errno.
func request(fd, msg int, family byte, flags uint16, seq uint32, attrs []byte, each func(family byte, attrs []byte)) error {
	// nlmsghdr + nfgenmsg{family, version 0, res_id 0} + attributes.
	req := make([]byte, unix.NLMSG_HDRLEN+4, unix.NLMSG_HDRLEN+4+len(attrs))
	req[unix.NLMSG_HDRLEN] = family
	req = append(req, attrs...)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], uint16(unix.NFNL_SUBSYS_NFTABLES<<8|msg))
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|flags)
	binary.NativeEndian.PutUint32(req[8:], seq)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netlink send: %w", err)
	}
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return fmt.Errorf("netlink receive: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return fmt.Errorf("netlink: %w", err)
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return nil
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if errno := int32(binary.NativeEndian.Uint32(m.Data)); errno != 0 {
						return unix.Errno(-errno)
					}
				}
				return nil
			}
			if len(m.Data) >= 4 {
				each(m.Data[0], m.Data[4:])
			}
			if flags&unix.NLM_F_DUMP == 0 {
				return nil // the one answer
			}
		}
	}
}

// attributes iterates netlink attributes: type (without the nested and byte-order flags) and value.
func attributes(b []byte) func(yield func(uint16, []byte) bool) {
	return func(yield func(uint16, []byte) bool) {
		for len(b) >= unix.SizeofNlAttr {
			l := int(binary.NativeEndian.Uint16(b[0:]))
			typ := binary.NativeEndian.Uint16(b[2:]) &^ (unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
			if l < unix.SizeofNlAttr || l > len(b) {
				return
			}
			if !yield(typ, b[unix.SizeofNlAttr:l]) {
				return
			}
			b = b[min(len(b), (l+unix.NLA_ALIGNTO-1)&^(unix.NLA_ALIGNTO-1)):]
		}
	}
}

func cstring(b []byte) string { return strings.TrimRight(string(b), "\x00") }

func be64(b []byte) int {
	if len(b) < 8 {
		return 0
	}
	return int(binary.BigEndian.Uint64(b))
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
