package nftables

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// val is a packet field (or a literal) as the walk sees it.
type val struct {
	t string
	// known is false when the trace cannot tell the field's value (why says so); such a condition is
	// assumed to match.
	known bool
	why   string
	// absent is set when the packet has no such field at all (a tcp header field of a udp packet): nft's
	// implicit protocol dependency fails, so the rule does not match.
	absent string
	addr   netip.Addr
	num    uint64
	str    string
	flags  []string
}

func unknown(t, why string) val { return val{t: t, why: why} }

func (v val) String() string {
	if v.absent != "" {
		return "absent"
	}
	if !v.known {
		return "unknown"
	}
	switch v.t {
	case tAddr, tAddr6:
		return v.addr.String()
	case tProto:
		if n, ok := protoNames[v.num]; ok {
			return n
		}
		return strconv.FormatUint(v.num, 10)
	case tMark:
		return fmt.Sprintf("0x%08x", v.num)
	case tCtState, tStatus:
		if len(v.flags) == 0 {
			return "none"
		}
		return strings.Join(v.flags, ",")
	case tIfname:
		return strconv.Quote(v.str)
	case tFibOif:
		if v.str == "" {
			return "missing"
		}
		return strconv.Quote(v.str)
	case tPort, tInt:
		return strconv.FormatUint(v.num, 10)
	}
	if v.str != "" || v.num == 0 && !v.addr.IsValid() {
		return v.str
	}
	if v.addr.IsValid() {
		return v.addr.String()
	}
	return strconv.FormatUint(v.num, 10)
}

var protoNumbers = map[string]uint64{"icmp": 1, "igmp": 2, "tcp": 6, "udp": 17, "dccp": 33, "gre": 47, "esp": 50,
	"ah": 51, "icmpv6": 58, "ipv6-icmp": 58, "sctp": 132, "udplite": 136}

// serviceNames are the /etc/services names nft may print instead of a port number.
var serviceNames = map[string]uint64{"ftp": 21, "ssh": 22, "telnet": 23, "smtp": 25, "domain": 53, "http": 80,
	"pop3": 110, "ntp": 123, "imap": 143, "snmp": 161, "ldap": 389, "https": 443, "imaps": 993, "pop3s": 995,
	"mysql": 3306, "postgresql": 5432, "http-alt": 8080}

// literal converts a literal expression to a value of datatype t; ok is false when it is not one.
func literal(x *Expr, t string) (val, bool) {
	if x == nil {
		return val{}, false
	}
	if x.Kind == KElem && len(x.Args) == 1 {
		return literal(x.Args[0], t)
	}
	v := val{t: t, known: true}
	switch x.Kind {
	case KString:
		switch t {
		case tAddr, tAddr6:
			a, err := netip.ParseAddr(x.Str)
			if err != nil {
				return v, false
			}
			v.addr = a
		case tProto:
			if n, ok := protoNumbers[strings.ToLower(x.Str)]; ok {
				v.num = n
			} else if n, err := strconv.ParseUint(x.Str, 0, 8); err == nil {
				v.num = n
			} else {
				return v, false
			}
		case tPort, tInt, tMark:
			if n, ok := serviceNames[x.Str]; ok && t == tPort {
				v.num = n
			} else if n, err := strconv.ParseUint(x.Str, 0, 64); err == nil {
				v.num = n
			} else {
				return v, false
			}
		case tCtState, tStatus:
			v.flags = []string{strings.ToLower(x.Str)}
		default:
			v.str = x.Str
		}
		return v, true
	case KNumber:
		if x.Neg {
			return v, false
		}
		switch t {
		case tAddr, tAddr6, tCtState, tStatus, tIfname, tFibType, tFibOif:
			return v, false
		}
		v.num = x.Num
		return v, true
	case KBool:
		if t != tFibOif {
			return v, false
		}
		if x.Bool {
			v.str = "*exists*"
		}
		return v, true
	case KList:
		if t != tCtState && t != tStatus || len(x.Args) > 0 {
			return v, false
		}
		for _, f := range x.Flags {
			v.flags = append(v.flags, strings.ToLower(f))
		}
		return v, true
	}
	return v, false
}

// equal says whether packet value v equals literal l (both of v's type). Flag types match when they share a
// flag (nft's implicit bitmask match: ct state established,related).
func equal(v, l val) bool {
	switch v.t {
	case tAddr, tAddr6:
		return v.addr == l.addr
	case tCtState, tStatus:
		for _, a := range v.flags {
			for _, b := range l.flags {
				if a == b {
					return true
				}
			}
		}
		return false
	case tIfname:
		if p, ok := strings.CutSuffix(l.str, "*"); ok {
			return strings.HasPrefix(v.str, p)
		}
		return v.str == l.str
	case tFibOif:
		if l.str == "*exists*" {
			return v.str != ""
		}
		if l.str == "" {
			return v.str == ""
		}
		return v.str == l.str
	case tFibType, tCtDir, tNfproto, tEther, tString:
		return v.str == l.str
	}
	if v.str != "" || l.str != "" {
		return v.str == l.str
	}
	return v.num == l.num
}

// cmp orders two values of the same type (-1, 0, 1); ok is false for types without an order.
func cmp(a, b val) (int, bool) {
	switch a.t {
	case tAddr, tAddr6:
		if !a.addr.IsValid() || !b.addr.IsValid() {
			return 0, false
		}
		return a.addr.Compare(b.addr), true
	case tProto, tPort, tInt, tMark:
		switch {
		case a.num < b.num:
			return -1, true
		case a.num > b.num:
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

// matchElem says whether v matches one set element (or literal) e of v's type: a value, a prefix, a range.
// det is false when v is not known (the element is then taken as matching).
func matchElem(v val, e *Expr) (match, det bool) {
	if !v.known {
		return true, false
	}
	if e == nil {
		return false, true
	}
	switch e.Kind {
	case KElem:
		if len(e.Args) == 1 {
			return matchElem(v, e.Args[0])
		}
		return false, true
	case KPrefix:
		if len(e.Args) != 1 || !v.addr.IsValid() {
			return false, true
		}
		l, ok := literal(e.Args[0], v.t)
		if !ok || !l.addr.IsValid() {
			return false, true
		}
		p, err := l.addr.Prefix(e.Len)
		if err != nil {
			return false, true
		}
		return p.Contains(v.addr), true
	case KRange:
		if len(e.Args) != 2 {
			return false, true
		}
		lo, ok1 := literal(e.Args[0], v.t)
		hi, ok2 := literal(e.Args[1], v.t)
		if !ok1 || !ok2 {
			return false, true
		}
		c1, ok1 := cmp(v, lo)
		c2, ok2 := cmp(v, hi)
		return ok1 && ok2 && c1 >= 0 && c2 <= 0, true
	}
	l, ok := literal(e, v.t)
	if !ok {
		return false, true
	}
	return equal(v, l), true
}

// matchKey says whether the key values vs (one per concatenation part) match element key e.
func matchKey(vs []val, e *Expr) (match, det bool) {
	if e != nil && e.Kind == KElem && len(e.Args) == 1 {
		e = e.Args[0]
	}
	if len(vs) == 1 {
		return matchElem(vs[0], e)
	}
	if e == nil || e.Kind != KConcat || len(e.Args) != len(vs) {
		return false, true
	}
	det = true
	for i, v := range vs {
		m, d := matchElem(v, e.Args[i])
		if !m {
			return false, true
		}
		det = det && d
	}
	return true, det
}

// keyText prints key values for a reason: "ip daddr 172.18.0.3" for a simple key, "172.18.0.3 . tcp . 80"
// for a concatenation.
func keyText(key *Expr, vs []val) string {
	if key != nil && key.Kind == KConcat {
		var parts []string
		for _, v := range vs {
			parts = append(parts, v.String())
		}
		return strings.Join(parts, " . ")
	}
	if len(vs) == 1 {
		return renderExpr(key, tOther) + " " + vs[0].String()
	}
	return renderExpr(key, tOther)
}
