package netstate

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
)

// ReadIPSets reads this network namespace's ipsets from the kernel over netlink, the way `ipset save` does,
// and writes their members as it prints them. It needs no ipset tool: kind's node image has none. A kernel
// without the ip_set module loaded has no sets, and is not asked (asking would load the module).
func ReadIPSets() ([]IPSet, error) {
	if _, err := os.Stat("/sys/module/ip_set"); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	// The library logs, with the standard logger, each attribute it does not decode: every hash set's
	// bucketsize and initval on current kernels. They say nothing to a user of k8sguide.
	prev := log.Writer()
	log.SetOutput(io.Discard)
	results, err := netlink.IpsetListAll()
	log.SetOutput(prev)
	if err != nil {
		return nil, fmt.Errorf("listing ipsets over netlink: %w", err)
	}
	var sets []IPSet
	index := map[string]int{}
	for _, r := range results {
		// A large set comes in several messages, each with the set's name and some of its members.
		i, ok := index[r.SetName]
		if !ok {
			i = len(sets)
			index[r.SetName] = i
			sets = append(sets, IPSet{Name: r.SetName, Type: r.TypeName, Options: setOptions(r)})
		}
		for _, e := range r.Entries {
			m, err := memberString(r.TypeName, e)
			if err != nil {
				return nil, fmt.Errorf("ipset %s: %w", r.SetName, err)
			}
			sets[i].Members = append(sets[i].Members, m)
		}
	}
	return sets, nil
}

// setOptions is what of a set's create line the kernel reports and matching could care about (bucketsize and
// initval, which `ipset save` also prints, are not decoded by the netlink library).
func setOptions(r netlink.IPSetResult) string {
	if strings.HasPrefix(r.TypeName, "bitmap:port") {
		return fmt.Sprintf("range %d-%d", r.PortFrom, r.PortTo)
	}
	family := "inet"
	if r.Family == 10 { // NFPROTO_IPV6
		family = "inet6"
	}
	return fmt.Sprintf("family %s hashsize %d maxelem %d", family, r.HashSize, r.MaxElements)
}

// memberString writes an entry as `ipset save` does, dimension by dimension of the set's type: "10.96.0.10,tcp:80"
// (hash:ip,port), "10.244.1.2,tcp:80,10.244.1.2" (hash:ip,port,ip), "30080" (bitmap:port), "10.0.0.0/8" (a net;
// a whole-address net is written without its prefix length).
func memberString(typeName string, e netlink.IPSetEntry) (string, error) {
	_, dims, _ := strings.Cut(typeName, ":")
	var parts []string
	ips := 0 // the first address dimension is IP/CIDR, the second IP2/CIDR2
	for _, dim := range strings.Split(dims, ",") {
		switch dim {
		case "ip", "net":
			ip, cidr := e.IP, e.CIDR
			if ips > 0 {
				ip, cidr = e.IP2, e.CIDR2
			}
			ips++
			if ip == nil {
				return "", fmt.Errorf("an entry without its %s dimension", dim)
			}
			s := ip.String()
			if bits := 8 * len(ipBytes(ip)); dim == "net" && cidr != 0 && int(cidr) != bits {
				s += "/" + strconv.Itoa(int(cidr))
			}
			parts = append(parts, s)
		case "port":
			if e.Port == nil {
				return "", fmt.Errorf("an entry without its port")
			}
			port := strconv.Itoa(int(*e.Port))
			if e.Protocol != nil && !strings.HasPrefix(typeName, "bitmap:") {
				port = protocolName(*e.Protocol) + ":" + port
			}
			parts = append(parts, port)
		case "mark":
			if e.Mark == nil {
				return "", fmt.Errorf("an entry without its mark")
			}
			parts = append(parts, fmt.Sprintf("0x%08x", *e.Mark))
		case "iface":
			parts = append(parts, e.IFace)
		case "mac":
			parts = append(parts, e.MAC.String())
		default:
			return "", fmt.Errorf("set type %s: dimension %q is not read", typeName, dim)
		}
	}
	return strings.Join(parts, ","), nil
}

func ipBytes(ip net.IP) net.IP {
	if v4 := ip.To4(); v4 != nil {
		return v4
	}
	return ip
}

// protocolName is how ipset names an entry's protocol (from /etc/protocols, as ipset does for these).
func protocolName(p uint8) string {
	switch p {
	case 1:
		return "icmp"
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 58:
		return "ipv6-icmp"
	case 132:
		return "sctp"
	}
	return strconv.Itoa(int(p))
}
