package ipvs

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
)

// `ipvsadm -L` without -n prints each address as its host name when the node's resolver has one
// (gethostbyaddr: "kubernetes.default.svc.cluster.local", "node1", "localhost") and each TCP or UDP port as its
// service name when /etc/services has one (getservbyport: "http", "https", "postgresql"); SCTP ports are always
// numbers. A host name cannot be turned back into its address offline (it was the node's resolver's answer, and a
// name like "10-244-1-5.web.default.svc" only looks like an address), so a server printed with one keeps its
// name and no address. A service name can be turned back into its port, where every /etc/services a node is
// likely to have gives the name the same port.
//
// ipvsadm also cuts what it prints (ipvsadm.c print_service_entry): a virtual server's "PROTO  NAME" at 33
// characters, a real server's name at 28 (IPv4; IPv6 at 59, its 60-byte buffer). Numbers never reach those widths;
// a name that does may have lost its end, port included ("…svc.cluster.local:https" cut to "…:http" would read
// as port 80).

// Printed is how a listing without -n printed an address and port that it did not print as numbers.
type Printed struct {
	// As is the text as printed: "kubernetes.default.svc.cluster.local:https", "10.96.0.1:https".
	As string `json:"printedAs,omitempty"`
	// NoAddress: the host was printed as a name, whose address the listing does not give.
	NoAddress bool `json:"noAddress,omitempty"`
	// NoPort: the port was printed as a service name that does not tell the port, or the text was cut.
	NoPort bool `json:"noPort,omitempty"`
	// Cut: the text reached ipvsadm's column width and may have lost its end.
	Cut bool `json:"cut,omitempty"`
}

// Unresolved says what of the server the listing does not give: "address", "port", "address and port", or "".
func (p Printed) Unresolved() string {
	switch {
	case p.NoAddress && p.NoPort:
		return "address and port"
	case p.NoAddress:
		return "address"
	case p.NoPort:
		return "port"
	}
	return ""
}

// why says why the listing does not give what Unresolved names, for a Missing line.
func (p Printed) why() string {
	var s []string
	if p.Cut {
		s = append(s, "ipvsadm cut the name at its column width")
	} else {
		if p.NoAddress {
			s = append(s, "`ipvsadm -L` printed a host name, not the address")
		}
		if p.NoPort {
			_, port := splitHostPort(p.As)
			if ports := netfilter.ServicePorts(port); len(ports) > 1 {
				s = append(s, fmt.Sprintf("the service name %s is port %s depending on the node's /etc/services", port, orList(ports)))
			} else {
				s = append(s, fmt.Sprintf("the service name %q is not one k8sguide reads back", port))
			}
		}
	}
	return strings.Join(s, "; ") + "; paste `ipvsadm -Ln`"
}

func orList(ports []uint16) string {
	var s []string
	for _, p := range ports {
		s = append(s, strconv.Itoa(int(p)))
	}
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// Widths at which ipvsadm cuts what it prints (IPv4; an IPv6 server is cut by its 60-byte buffer only).
const (
	serviceLineWidth = 33 // "PROTO  NAME:PORT", svc_name[33] = '\0'
	realServerWidth  = 28 // dname[28] = '\0'
	bufferWidth      = 59
)

// readAddrPort reads an address and port as a listing printed them: numbers (-n), or names (without -n).
// width is how many characters ipvsadm leaves for it: a text that long may have been cut.
func readAddrPort(s string, width int) (netip.Addr, uint16, Printed, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr(), ap.Port(), Printed{}, nil
	}
	p := Printed{As: s}
	if strings.HasPrefix(s, "[") {
		width = bufferWidth
	}
	p.Cut = len(s) >= width
	host, port := splitHostPort(s)
	// ipvsadm prints NAME:PORT whole unless it cut it; a host name is text (what gethostbyaddr returned).
	if host == "" || port == "" && !p.Cut || !isText(s) {
		return netip.Addr{}, 0, p, fmt.Errorf("%q: want ADDRESS:PORT or NAME:SERVICE", s)
	}
	addr, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	if err != nil || p.Cut && !strings.Contains(s, ":") {
		addr, p.NoAddress = netip.Addr{}, true
	}
	num, ok := netfilter.PortNumber(port)
	p.NoPort = !ok
	if p.Cut {
		num, p.NoPort = 0, true
	}
	return addr, num, p, nil
}

// isText says whether s is printable UTF-8, as a host or service name is.
func isText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// splitHostPort splits "host:port", "[v6]:port" or a cut "host" (no port).
func splitHostPort(s string) (host, port string) {
	if strings.HasPrefix(s, "[") {
		if i := strings.LastIndex(s, "]:"); i >= 0 {
			return s[:i+1], s[i+2:]
		}
		return s, ""
	}
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		return s[:i], s[i+1:]
	}
	return s, ""
}
