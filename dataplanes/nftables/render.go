package nftables

import (
	"fmt"
	"strconv"
	"strings"
)

// Datatypes of selectors and literals, named as nft names them.
const (
	tAddr    = "ipv4_addr"
	tAddr6   = "ipv6_addr"
	tProto   = "inet_proto"
	tPort    = "inet_service"
	tMark    = "mark"
	tInt     = "integer"
	tIfname  = "ifname"
	tCtState = "ct_state"
	tStatus  = "ct_status"
	tCtDir   = "ct_dir"
	tFibType = "fib_addrtype"
	tFibOif  = "fib_oif" // fib … oif/oifname: an interface name, or exists/missing
	tNfproto = "nf_proto"
	tEther   = "ether_type"
	tVerdict = "verdict"
	tString  = "string"
	tOther   = ""
)

// typeOf is the datatype of a selector expression (what its literals mean and how they print).
func typeOf(e *Expr) string {
	if e == nil {
		return tOther
	}
	switch e.Kind {
	case KPayload:
		switch {
		case e.Base != "":
			return tInt
		case (e.Str == "ip" || e.Str == "arp") && (e.Field == "saddr" || e.Field == "daddr"):
			return tAddr
		case e.Str == "ip6" && (e.Field == "saddr" || e.Field == "daddr"):
			return tAddr6
		case e.Str == "ip" && e.Field == "protocol", e.Str == "ip6" && e.Field == "nexthdr":
			return tProto
		case e.Field == "sport" || e.Field == "dport":
			return tPort
		}
		return tInt
	case KMeta:
		switch e.Key {
		case "l4proto":
			return tProto
		case "mark":
			return tMark
		case "iifname", "oifname", "iif", "oif", "ibrname", "obrname", "ibriport", "obriport":
			return tIfname
		case "nfproto":
			return tNfproto
		case "protocol":
			return tEther
		}
		return tInt
	case KCt:
		switch e.Key {
		case "state":
			return tCtState
		case "status":
			return tStatus
		case "mark":
			return tMark
		case "direction":
			return tCtDir
		case "saddr", "daddr":
			if e.Str == "ip6" {
				return tAddr6
			}
			return tAddr
		case "proto-src", "proto-dst":
			return tPort
		case "protocol":
			return tProto
		case "l3proto":
			return tNfproto
		}
		return tInt
	case KFib:
		if e.Field == "type" {
			return tFibType
		}
		return tFibOif
	case KBinop:
		if len(e.Args) > 0 {
			return typeOf(e.Args[0])
		}
	case KNumgen, KHash:
		return tInt
	}
	return tOther
}

// componentTypes are the datatypes of a key expression's parts (one for a simple key).
func componentTypes(e *Expr) []string {
	if e != nil && e.Kind == KConcat {
		out := make([]string, len(e.Args))
		for i, a := range e.Args {
			out[i] = typeOf(a)
		}
		return out
	}
	return []string{typeOf(e)}
}

var protoNames = map[uint64]string{1: "icmp", 2: "igmp", 6: "tcp", 17: "udp", 33: "dccp", 47: "gre", 50: "esp",
	51: "ah", 58: "icmpv6", 132: "sctp", 136: "udplite"}

// RenderRule prints a rule in nft's syntax, from its statements (for rulesets given without their text).
func RenderRule(r *Rule) string {
	var parts []string
	for _, s := range r.Stmts {
		parts = append(parts, RenderStmt(s))
	}
	if r.Comment != "" {
		parts = append(parts, "comment "+strconv.Quote(r.Comment))
	}
	return strings.Join(parts, " ")
}

// statefulKinds are the statements RenderStmt prints from their raw JSON (or text).
var statefulKinds = map[string]bool{SCounter: true, SLog: true, SLimit: true, SQuota: true}

// RenderStmt prints one statement in nft's syntax.
func RenderStmt(s *Stmt) string {
	if s == nil {
		return ""
	}
	if statefulKinds[s.Kind] && s.Raw != "" && s.Raw[0] != '{' {
		// ParseText keeps the statement as nft printed it (the model leaves out its options).
		return s.Raw
	}
	switch s.Kind {
	case SMatch:
		t := typeOf(s.Left)
		l := renderExpr(s.Left, tOther)
		r := renderTyped(s.Right, s.Left, t)
		switch {
		case s.Op == "in", s.Op == "==" && s.Left != nil && s.Left.Kind != KBinop && t != tCtState && t != tStatus:
			// nft leaves out an implicit ==, except after a bit operation and for bitmask types.
			return l + " " + r
		}
		return l + " " + s.Op + " " + r
	case SVerdict:
		if s.Target != "" {
			return s.Verdict + " " + s.Target
		}
		return s.Verdict
	case SVmap:
		return renderExpr(s.Left, tOther) + " vmap " + renderData(s.Right, s.Left, []string{tVerdict})
	case SMangle:
		return renderExpr(s.Left, tOther) + " set " + renderTyped(s.Right, s.Left, typeOf(s.Left))
	case SCounter:
		return "counter" + optsText(s.Raw, "counter", []string{"packets", "bytes"})
	case SLog:
		return "log" + optsText(s.Raw, "log", []string{"prefix", "group", "snaplen", "queue-threshold", "level"})
	case SLimit:
		return "limit" + limitText(s.Raw)
	case SQuota:
		return "quota" + optsText(s.Raw, "quota", []string{"val", "val_unit"})
	case SNotrack:
		return "notrack"
	case SDNAT, SSNAT, SMasquerade, SRedirect:
		out := s.Kind
		if s.Family != "" {
			out += " " + s.Family
		}
		if s.Addr != nil || s.Port != nil {
			out += " to "
		}
		if s.Addr != nil {
			if s.Addr.Kind == KMap && len(s.Addr.Args) == 2 {
				key := s.Addr.Args[0]
				out += renderExpr(key, tOther) + " map " + renderData(s.Addr.Args[1], key, []string{tAddr, tPort})
			} else {
				out += renderExpr(s.Addr, tAddr)
			}
		}
		if s.Port != nil {
			out += ":" + renderExpr(s.Port, tPort)
		}
		if len(s.Flags) > 0 {
			out += " " + strings.Join(s.Flags, ",")
		}
		return out
	case SReject:
		switch {
		case s.RejectType == "" || s.RejectType == "icmp" && s.RejectCode == "port-unreachable" ||
			s.RejectType == "icmpx" && s.RejectCode == "port-unreachable":
			return "reject"
		case s.RejectCode == "":
			return "reject with " + s.RejectType
		}
		return "reject with " + s.RejectType + " " + s.RejectCode
	case SSetUpdate:
		return s.Op + " @" + s.Target + " { " + renderExpr(s.Left, tOther) + " }"
	case SXt:
		return "xt " + s.Name
	}
	return s.Raw
}

// renderTyped prints a literal-ish right-hand side with the datatype of the left side.
func renderTyped(e *Expr, left *Expr, t string) string {
	if e == nil {
		return ""
	}
	if left != nil && left.Kind == KConcat {
		return renderData(e, left, nil)
	}
	return renderExpr(e, t)
}

// renderData prints a set/map (anonymous or @ref) whose keys have left's datatypes and whose values have vt.
func renderData(e *Expr, left *Expr, vt []string) string {
	if e == nil {
		return ""
	}
	kt := componentTypes(left)
	switch e.Kind {
	case KSet:
		var parts []string
		for _, a := range e.Args {
			if a.Kind == KPair && len(a.Args) == 2 {
				parts = append(parts, renderParts(a.Args[0], kt)+" : "+renderParts(a.Args[1], vt))
			} else {
				parts = append(parts, renderParts(a, kt))
			}
		}
		return "{ " + strings.Join(parts, ", ") + " }"
	}
	return renderParts(e, kt)
}

// renderParts prints a literal, or a concatenation of literals with one datatype per part.
func renderParts(e *Expr, types []string) string {
	if e == nil {
		return ""
	}
	if e.Kind == KConcat {
		var parts []string
		for i, a := range e.Args {
			t := tOther
			if i < len(types) {
				t = types[i]
			}
			parts = append(parts, renderExpr(a, t))
		}
		return strings.Join(parts, " . ")
	}
	t := tOther
	if len(types) == 1 {
		t = types[0]
	}
	return renderExpr(e, t)
}

// renderExpr prints an expression; t is the datatype literals in it have.
func renderExpr(e *Expr, t string) string {
	if e == nil {
		return ""
	}
	switch e.Kind {
	case KString:
		if t == tIfname || t == tString || strings.ContainsAny(e.Str, " \t\"") || e.Str == "" {
			return strconv.Quote(e.Str)
		}
		return e.Str
	case KNumber:
		return renderNumber(e, t)
	case KBool:
		if e.Bool {
			return "exists"
		}
		return "missing"
	case KList:
		if len(e.Args) > 0 {
			var parts []string
			for _, a := range e.Args {
				parts = append(parts, renderExpr(a, t))
			}
			return strings.Join(parts, ",")
		}
		return strings.Join(e.Flags, ",")
	case KSetRef:
		return "@" + e.Str
	case KPayload:
		if e.Base != "" {
			return fmt.Sprintf("@%s,%d,%d", e.Base, e.Offset, e.Len)
		}
		return e.Str + " " + e.Field
	case KMeta:
		switch e.Key {
		case "iif", "oif", "iifname", "oifname", "iifgroup", "oifgroup":
			return e.Key
		}
		return "meta " + e.Key
	case KCt:
		out := "ct"
		if e.Dir != "" {
			out += " " + e.Dir
		}
		if e.Str != "" {
			out += " " + e.Str
		}
		return out + " " + e.Key
	case KFib:
		return "fib " + strings.Join(e.Flags, " . ") + " " + e.Field
	case KNumgen:
		out := fmt.Sprintf("numgen %s mod %d", e.Mode, e.Mod)
		if e.Offset != 0 {
			out += fmt.Sprintf(" offset %d", e.Offset)
		}
		return out
	case KHash:
		out := e.Str
		if len(e.Args) > 0 {
			out += " " + renderExpr(e.Args[0], tOther)
		}
		out += fmt.Sprintf(" mod %d", e.Mod)
		if e.Num != 0 {
			out += fmt.Sprintf(" seed %#x", e.Num)
		}
		if e.Offset != 0 {
			out += fmt.Sprintf(" offset %d", e.Offset)
		}
		return out
	case KConcat:
		var parts []string
		for _, a := range e.Args {
			parts = append(parts, renderExpr(a, t))
		}
		return strings.Join(parts, " . ")
	case KSet:
		var parts []string
		for _, a := range e.Args {
			parts = append(parts, renderExpr(a, t))
		}
		return "{ " + strings.Join(parts, ", ") + " }"
	case KPair:
		if len(e.Args) == 2 {
			return renderExpr(e.Args[0], t) + " : " + renderExpr(e.Args[1], tOther)
		}
	case KMap:
		if len(e.Args) == 2 {
			return renderExpr(e.Args[0], tOther) + " map " + renderData(e.Args[1], e.Args[0], nil)
		}
	case KPrefix:
		if len(e.Args) == 1 {
			return fmt.Sprintf("%s/%d", renderExpr(e.Args[0], t), e.Len)
		}
	case KRange:
		if len(e.Args) == 2 {
			return renderExpr(e.Args[0], t) + "-" + renderExpr(e.Args[1], t)
		}
	case KBinop:
		if len(e.Args) == 2 {
			lt := typeOf(e.Args[0])
			r := renderExpr(e.Args[1], lt)
			if e.Args[1].Kind == KBinop {
				r = "(" + r + ")"
			}
			return renderExpr(e.Args[0], t) + " " + e.Op + " " + r
		}
	case KElem:
		if len(e.Args) == 1 {
			out := renderExpr(e.Args[0], t)
			if e.Timeout != 0 {
				out += fmt.Sprintf(" timeout %ds", e.Timeout)
			}
			if e.Comment != "" {
				out += " comment " + strconv.Quote(e.Comment)
			}
			return out
		}
	case KVerdict:
		if e.Target != "" {
			return e.Str + " " + e.Target
		}
		return e.Str
	}
	if e.Raw != "" {
		return e.Raw
	}
	return "?"
}

func renderNumber(e *Expr, t string) string {
	if e.Neg {
		return "-" + strconv.FormatUint(e.Num, 10)
	}
	switch t {
	case tMark:
		return fmt.Sprintf("0x%08x", e.Num)
	case tProto:
		if n, ok := protoNames[e.Num]; ok {
			return n
		}
	}
	return strconv.FormatUint(e.Num, 10)
}

// optsText prints the options of a statement's JSON object in order ("counter packets 0 bytes 0").
func optsText(rawJSON, kind string, keys []string) string {
	o := objectOf(rawJSON, kind)
	var out string
	for _, k := range keys {
		v, ok := o[k]
		if !ok {
			continue
		}
		switch x := v.(type) {
		case string:
			if k == "prefix" {
				out += " " + k + " " + strconv.Quote(x)
			} else if k == "val_unit" {
				out += " " + x
			} else {
				out += " " + k + " " + x
			}
		default:
			if k == "val" {
				out += " " + str(x)
			} else {
				out += " " + k + " " + str(x)
			}
		}
	}
	return out
}

func limitText(rawJSON string) string {
	o := objectOf(rawJSON, "limit")
	out := " rate"
	if inv, _ := o["inv"].(bool); inv {
		out += " over"
	}
	out += " " + str(o["rate"])
	if u := str(o["rate_unit"]); u != "" && u != "packets" {
		out += " " + u
	}
	out += "/" + str(o["per"])
	if b := integer(o["burst"]); b != 0 && b != 5 {
		out += fmt.Sprintf(" burst %d packets", b)
	}
	return out
}

func objectOf(rawJSON, kind string) map[string]any {
	o, _ := decodeObject(rawJSON)[kind].(map[string]any)
	return o
}
