package nftables

import (
	"math"
	"strconv"
	"strings"
)

// Parsing expressions.

// parseMode says whether selectors (ip saddr, meta mark) may appear: in a match's value only literals do
// (so "ether type ip" reads ip as a value), elsewhere both.
type parseMode bool

const (
	literalMode  parseMode = false
	selectorMode parseMode = true
)

// payloadProtocols are the protocol words of payload expressions (ip saddr, th dport).
var payloadProtocols = map[string]bool{"ether": true, "vlan": true, "arp": true, "ip": true, "icmp": true,
	"igmp": true, "ip6": true, "icmpv6": true, "ah": true, "esp": true, "comp": true, "udp": true, "udplite": true,
	"tcp": true, "dccp": true, "sctp": true, "th": true, "gre": true, "gretap": true, "vxlan": true,
	"geneve": true}

// exthdrWords start IPv6 extension header expressions, which the model does not know.
var exthdrWords = map[string]bool{"hbh": true, "rt0": true, "rt2": true, "srh": true, "frag": true, "dst": true,
	"mh": true, "exthdr": true}

// unqualifiedMeta are the meta keys nft prints without "meta".
var unqualifiedMeta = map[string]bool{"iif": true, "oif": true, "iifname": true, "oifname": true, "iifgroup": true,
	"oifgroup": true,
	// nft also reads these without "meta", and iptables-nft's translations print them so (`mark and 0x4000`).
	"mark": true, "skuid": true, "skgid": true, "nftrace": true, "pkttype": true, "iiftype": true,
	"oiftype": true, "rtclassid": true, "ibrname": true, "obrname": true, "cgroup": true}

// isSelector says whether w starts an expression that reads the packet (or its context).
func isSelector(w string) bool {
	switch w {
	case "meta", "ct", "fib", "numgen", "jhash", "symhash", "rt", "osf", "socket", "ipsec", "tunnel":
		return true
	}
	return payloadProtocols[w] || unqualifiedMeta[w] || exthdrWords[w] || isRawPayload(w)
}

func isRawPayload(w string) bool {
	return strings.HasPrefix(w, "@ll,") || strings.HasPrefix(w, "@nh,") || strings.HasPrefix(w, "@th,") ||
		strings.HasPrefix(w, "@ih,")
}

// valueList reads a value and, comma-separated, more: a list (ct state established,related).
func (p *textParser) valueList(mode parseMode) *Expr {
	first := p.mapExpr(mode)
	if p.peek().kind != tkComma {
		return first
	}
	items := []*Expr{first}
	for p.peek().kind == tkComma {
		p.next()
		items = append(items, p.mapExpr(mode))
	}
	return p.list(items)
}

// list builds a list literal as ParseRuleset reads a JSON array: strings are flags; when anything else is in
// it, its elements are the non-strings followed by the strings.
func (p *textParser) list(items []*Expr) *Expr {
	e := p.newExpr(KList)
	var args []*Expr
	for _, x := range items {
		if x.Kind == KString {
			e.Flags = append(e.Flags, x.Str)
		} else {
			args = append(args, x)
		}
	}
	if len(args) > 0 {
		for _, f := range e.Flags {
			args = append(args, p.str(f))
		}
		e.Args, e.Flags = args, nil
	}
	return e
}

// mapExpr reads an expression, and "map DATA" after it (ip saddr map @m, numgen random mod 2 map { … }).
func (p *textParser) mapExpr(mode parseMode) *Expr {
	key := p.concat(mode)
	if mode == selectorMode && p.peek().is("map") {
		p.next()
		m := p.newExpr(KMap)
		m.Args = p.args2(key, p.mapData())
		return m
	}
	return key
}

// mapData reads the data of a map or verdict map: an anonymous map or @name.
func (p *textParser) mapData() *Expr {
	t := p.peek()
	switch {
	case t.kind == tkLBrace:
		return p.setExpr(literalMode)
	case t.kind == tkWord && strings.HasPrefix(t.text, "@"):
		p.next()
		e := p.newExpr(KSetRef)
		e.Str = t.text[1:]
		return e
	}
	p.fail("expected a map, found %q", p.src[t.pos:t.end])
	return nil
}

// concat reads a . b . c (nft prints the operator between blanks).
func (p *textParser) concat(mode parseMode) *Expr {
	first := p.binary(mode, 1)
	if !p.peek().is(".") {
		return first
	}
	mark := len(p.exprStack)
	p.exprStack = append(p.exprStack, first)
	for p.peek().is(".") {
		p.next()
		x := p.binary(mode, 1)
		p.exprStack = append(p.exprStack, x)
	}
	e := p.newExpr(KConcat)
	e.Args = p.args(mark)
	return e
}

// binary reads primaries joined by the bit operators, which bind as in C: << and >> before &, before ^, before
// | (precedence climbing: operators of precedence min and above).
func (p *textParser) binary(mode parseMode, min int) *Expr {
	e := p.primary(mode)
	for {
		t := p.peek()
		prec := binopPrecedence(t)
		if prec == 0 || prec < min {
			return e
		}
		p.next()
		op := t.text
		if o, ok := binopWords[op]; ok {
			op = o
		}
		e = p.binop(op, e, p.binary(mode, prec+1))
	}
}

func binopPrecedence(t token) int {
	if t.kind != tkWord || len(t.text) > 6 {
		return 0
	}
	switch t.text {
	case "|", "or":
		return 1
	case "^", "xor":
		return 2
	case "&", "and":
		return 3
	case "<<", ">>", "lshift", "rshift":
		return 4
	}
	return 0
}

// binopWords are the words nft reads for the bit operators (iptables-nft's translations print them: `mark
// and 0x4000 == 0x4000`, `meta mark set mark or 0x4000`); the model holds the operator JSON has.
var binopWords = map[string]string{"or": "|", "xor": "^", "and": "&", "lshift": "<<", "rshift": ">>"}

func (p *textParser) primary(mode parseMode) *Expr {
	t := p.peek()
	switch t.kind {
	case tkLBrace:
		return p.setExpr(literalMode)
	case tkLParen:
		p.next()
		e := p.mapExpr(mode)
		p.expect(tkRParen, ")")
		return e
	case tkString:
		p.next()
		// "17:00"-"18:00": a range of strings.
		if n := p.peek(); n.pos == t.end && n.is("-") {
			if m := p.peekAfter(n); m.kind == tkString && m.pos == n.end {
				p.next()
				p.next()
				r := p.newExpr(KRange)
				r.Args = p.args2(p.str(t.text), p.str(m.text))
				return r
			}
		}
		return p.str(t.text)
	case tkWord:
		if mode == selectorMode && isSelector(t.text) && p.selectorFollows(t) {
			return p.selector()
		}
		p.next()
		return p.literal(t.text)
	}
	p.fail("expected a value, found %q", p.src[t.pos:t.end])
	return nil
}

// selectorFollows says whether the selector word t has its key after it (ip saddr), rather than being a
// value that happens to be a protocol's name (meta protocol set ip).
func (p *textParser) selectorFollows(t token) bool {
	if isRawPayload(t.text) {
		return true
	}
	if unqualifiedMeta[t.text] {
		return true
	}
	n := p.peekAfter(t)
	return n.kind == tkWord && !strongKeywords[n.text] && !relationalOps[n.text] && n.text != "." &&
		n.text != "set" && n.text != "map" && n.text != "vmap" && n.text != ":"
}

// selector reads an expression that reads the packet or its context.
func (p *textParser) selector() *Expr {
	t := p.next()
	w := t.text
	switch {
	case w == "meta":
		return p.leaf(leafKey{kind: KMeta, key: p.word("a meta key")})
	case unqualifiedMeta[w]:
		return p.leaf(leafKey{kind: KMeta, key: w})
	case w == "ct":
		dir := ""
		if n := p.peek(); n.is("original") || n.is("reply") {
			dir = p.next().text
		}
		key := p.word("a ct key")
		if key == "ip" || key == "ip6" {
			// ct original ip saddr: JSON key "ip saddr" (no family field)
			key += " " + p.word("a ct key")
		}
		return p.leaf(leafKey{kind: KCt, key: key, dir: dir})
	case w == "fib":
		return p.fib()
	case w == "numgen":
		e := p.newExpr(KNumgen)
		e.Mode = p.word("a numgen mode")
		p.expectWord("mod")
		e.Mod = p.number()
		if p.peek().is("offset") {
			p.next()
			e.Offset = p.number()
		}
		return e
	case w == "jhash" || w == "symhash":
		e := p.newExpr(KHash)
		e.Str = w
		if w == "jhash" {
			e.Args = p.args1(p.concat(selectorMode))
		}
		p.expectWord("mod")
		e.Mod = p.number()
		if p.peek().is("seed") {
			p.next()
			e.Num = p.number()
		}
		if p.peek().is("offset") {
			p.next()
			e.Offset = p.number()
		}
		return e
	case isRawPayload(w):
		// @nh,16,16
		parts := strings.Split(w[1:], ",")
		if len(parts) != 3 {
			p.fail("raw payload %q", w)
		}
		off, err1 := strconv.ParseUint(parts[1], 10, 64)
		n, err2 := strconv.Atoi(parts[2])
		if err1 != nil || err2 != nil {
			p.fail("raw payload %q", w)
		}
		e := p.newExpr(KPayload)
		e.Base, e.Offset, e.Len = parts[0], off, n
		return e
	case payloadProtocols[w]:
		return p.payload(t)
	}
	return p.unknownSelector(t)
}

// payload reads "PROTO FIELD" (t is PROTO).
func (p *textParser) payload(t token) *Expr {
	proto := t.text
	field := p.word("a " + proto + " field")
	switch {
	case proto == "tcp" && field == "option", proto == "ip" && field == "option", proto == "sctp" && field == "chunk",
		proto == "dccp" && field == "option":
		// tcp option maxseg size, ip option rr, sctp chunk data: extension headers, not modelled
		p.word("an option")
		p.optionalField()
		return p.unknownExpr(t.pos)
	case payloadProtocols[field] && (proto == "vxlan" || proto == "geneve" || proto == "gre" || proto == "gretap"):
		// vxlan ip saddr: a header inside a tunnel, not modelled
		p.word("a " + field + " field")
		return p.unknownExpr(t.pos)
	case proto == "arp" && (field == "saddr" || field == "daddr"):
		if n := p.peek(); n.is("ip") || n.is("ether") {
			field += " " + p.next().text // arp saddr ip: JSON field "saddr ip"
		}
	}
	return p.leaf(leafKey{kind: KPayload, str: proto, field: field})
}

// optionalField consumes the field of an option expression when there is one (tcp option maxseg size).
func (p *textParser) optionalField() {
	n := p.peek()
	if n.kind == tkWord && !strongKeywords[n.text] && !relationalOps[n.text] && n.text != "exists" &&
		n.text != "missing" && n.text != "set" && n.text != "." && (n.text[0] < '0' || n.text[0] > '9') {
		p.next()
	}
}

// unknownSelector reads the expressions nft has and the model does not (rt mtu, osf name, socket
// transparent, ipsec in reqid, extension headers): they become KUnknown, as in ParseRuleset.
func (p *textParser) unknownSelector(t token) *Expr {
	switch t.text {
	case "rt":
		if n := p.peek(); n.is("ip") || n.is("ip6") {
			p.next()
		}
		p.word("an rt key")
	case "osf":
		if p.peek().is("ttl") {
			p.next()
			p.word("an osf ttl")
		}
		p.word("an osf key")
	case "socket":
		p.word("a socket key")
		if p.peek().is("level") {
			p.next()
			p.word("a level")
		}
	case "ipsec":
		p.word("a direction")
		if p.peek().is("spnum") {
			p.next()
			p.word("an spnum")
		}
		if k := p.word("an ipsec key"); k == "ip" || k == "ip6" {
			p.word("an ipsec key")
		}
	case "exthdr":
		p.word("an extension header")
		p.optionalField()
	case "tunnel":
		p.word("a tunnel key")
	default: // hbh, frag, …
		p.word("a field")
	}
	return p.unknownExpr(t.pos)
}

// fib reads "fib FLAG [. FLAG …] RESULT" (after "fib").
func (p *textParser) fib() *Expr {
	var flags []string
	for {
		flags = append(flags, p.word("a fib flag"))
		if !p.peek().is(".") {
			break
		}
		p.next()
	}
	e := p.newExpr(KFib)
	e.Flags, e.Field = flags, p.word("a fib result")
	return e
}

// number reads an unsigned number (decimal or 0x hex).
func (p *textParser) number() uint64 {
	w := p.word("a number")
	n, ok := parseLiteralNumber(w)
	if !ok {
		p.fail("number %q", w)
	}
	return n
}

// setExpr reads an anonymous set or map: "{ a, b }" or "{ k : v, … }" (nft prints them on the rule's line).
func (p *textParser) setExpr(mode parseMode) *Expr {
	p.expect(tkLBrace, "{")
	e := p.newExpr(KSet)
	mark := len(p.exprStack)
	if p.peek().kind == tkRBrace {
		p.next()
		return e
	}
	for {
		x := p.element(mode)
		p.exprStack = append(p.exprStack, x)
		switch t := p.next(); t.kind {
		case tkComma:
		case tkRBrace:
			e.Args = p.args(mark)
			return e
		default:
			p.fail("expected , or } in a set, found %q", p.src[t.pos:t.end])
		}
	}
}

// element reads one element of a set or map: a key with its options (timeout, expires, comment, and
// statements such as counter, which the model leaves out) and, in a map, ": value".
func (p *textParser) element(mode parseMode) *Expr {
	key := p.concat(mode)
	var comment string
	var timeout, expires int
	wrapped := false
	for {
		t := p.peek()
		switch {
		case t.is("timeout") || t.is("expires"):
			p.next()
			secs, ok := timeSeconds(p.word("a time"))
			if !ok {
				p.fail("%s not understood", t.text)
			}
			if t.text == "timeout" {
				timeout = secs
			} else {
				expires = secs
			}
			wrapped = true
			continue
		case t.is("comment"):
			p.next()
			comment = p.expect(tkString, "a comment").text
			wrapped = true
			continue
		case t.kind == tkWord && (strongKeywords[t.text] || t.text == "ct" || t.text == "last"):
			// counter packets 0 bytes 0, limit rate …, quota …: element statements
			p.elementStatement()
			continue
		}
		break
	}
	if wrapped {
		w := p.newExpr(KElem)
		w.Args, w.Comment, w.Timeout, w.Expires = p.args1(key), comment, timeout, expires
		key = w
	}
	if !p.peek().is(":") {
		return key
	}
	p.next()
	pair := p.newExpr(KPair)
	pair.Args = p.args2(key, p.mapValue())
	return pair
}

// elementStatement skips a statement attached to a set element, up to the next , : or }.
func (p *textParser) elementStatement() {
	p.next()
	for {
		t := p.peek()
		if t.kind == tkComma || t.kind == tkRBrace || t.kind == tkEOF || t.kind == tkNewline || t.is(":") ||
			t.is("timeout") || t.is("expires") || t.is("comment") {
			return
		}
		p.next()
	}
}

// mapValue reads a map element's value: a verdict or a (concatenation of) literals.
func (p *textParser) mapValue() *Expr {
	t := p.peek()
	if t.kind == tkWord {
		switch t.text {
		case "accept", "drop", "continue", "return":
			p.next()
			return p.leaf(leafKey{kind: KVerdict, str: t.text})
		case "jump", "goto":
			p.next()
			e := p.newExpr(KVerdict)
			e.Str, e.Target = t.text, p.word("a chain")
			return e
		}
	}
	return p.concat(literalMode)
}

// literal types a printed value as nft's JSON does: numbers (decimal, or hex as marks print) are numbers;
// addresses, names and symbols are strings; "a/n" is a prefix, "a-b" a range, exists/missing booleans.
func (p *textParser) literal(w string) *Expr {
	switch {
	case w == "exists" || w == "missing":
		return p.leaf(leafKey{kind: KBool, str: w})
	case strings.HasPrefix(w, "@"):
		e := p.newExpr(KSetRef)
		e.Str = w[1:]
		return e
	}
	if n, ok := parseLiteralNumber(w); ok {
		return p.num(n)
	}
	if i := strings.LastIndexByte(w, '/'); i > 0 && addressLike(w[:i]) {
		if n, err := strconv.Atoi(w[i+1:]); err == nil {
			e := p.newExpr(KPrefix)
			e.Args, e.Len = p.args1(p.str(w[:i])), n
			return e
		}
	}
	if i := strings.IndexByte(w[1:], '-') + 1; i > 0 && rangeEnd(w[:i]) && rangeEnd(w[i+1:]) {
		e := p.newExpr(KRange)
		e.Args = p.args2(p.literal(w[:i]), p.literal(w[i+1:]))
		return e
	}
	return p.str(w)
}

// parseLiteralNumber reads a decimal or 0x-hex number (as nft prints numbers and marks). It is called on
// every word a value may be, so it does not go through strconv, whose errors allocate.
func parseLiteralNumber(w string) (uint64, bool) {
	base, digits := uint64(10), w
	if len(w) > 2 && w[0] == '0' && w[1] == 'x' {
		base, digits = 16, w[2:]
	}
	if digits == "" {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		var d uint64
		switch {
		case isDigit(c):
			d = uint64(c - '0')
		case base == 16 && c >= 'a' && c <= 'f':
			d = uint64(c-'a') + 10
		case base == 16 && c >= 'A' && c <= 'F':
			d = uint64(c-'A') + 10
		default:
			return 0, false
		}
		if n > (math.MaxUint64-d)/base {
			return 0, false // too big for a number: nft's JSON prints such values as strings too
		}
		n = n*base + d
	}
	return n, true
}

// addressLike: an IPv4 or IPv6 address (what may stand before "/len").
func addressLike(s string) bool {
	return s != "" && (isDigit(s[0]) || strings.Contains(s, ":"))
}

// rangeEnd: what may stand on either side of a range's "-": a number or an address.
func rangeEnd(s string) bool {
	return s != "" && (isDigit(s[0]) || strings.Contains(s, ":") && !strings.HasPrefix(s, ":"))
}

// timeSeconds reads nft's time format ("3h", "59m58s744ms", "1d2h") and returns whole seconds, as nft's JSON
// prints them.
func timeSeconds(s string) (int, bool) {
	if s == "" {
		return 0, false
	}
	var ms uint64
	for s != "" {
		i := 0
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		if i == 0 {
			return 0, false
		}
		n, err := strconv.ParseUint(s[:i], 10, 64)
		if err != nil {
			return 0, false
		}
		s = s[i:]
		unit := uint64(1000) // a bare number is seconds
		switch {
		case strings.HasPrefix(s, "ms"):
			unit, s = 1, s[2:]
		case strings.HasPrefix(s, "d"):
			unit, s = 86400000, s[1:]
		case strings.HasPrefix(s, "h"):
			unit, s = 3600000, s[1:]
		case strings.HasPrefix(s, "m"):
			unit, s = 60000, s[1:]
		case strings.HasPrefix(s, "s"):
			s = s[1:]
		case s != "":
			return 0, false
		}
		ms += n * unit
	}
	if ms/1000 > 1<<31-1 {
		return 0, false
	}
	return int(ms / 1000), true
}

// typeofDatatype is the data type nft names for a typeof expression ("" when this table does not know it).
func typeofDatatype(e *Expr) string {
	switch e.Kind {
	case KPayload:
		switch {
		case e.Base != "":
			return "integer"
		case e.Field == "saddr" || e.Field == "daddr":
			switch e.Str {
			case "ip":
				return tAddr
			case "ip6":
				return tAddr6
			case "ether":
				return "ether_addr"
			}
			return ""
		case e.Field == "sport" || e.Field == "dport":
			return tPort
		case e.Str == "ip" && e.Field == "protocol" || e.Str == "ip6" && e.Field == "nexthdr":
			return tProto
		case e.Str == "ether" && e.Field == "type" || e.Str == "vlan" && e.Field == "type":
			return tEther
		case e.Field == "dscp":
			return "dscp"
		case e.Field == "ecn":
			return "ecn"
		case e.Str == "tcp" && e.Field == "flags":
			return "tcp_flag"
		case (e.Str == "icmp" || e.Str == "icmpv6") && (e.Field == "type" || e.Field == "code"):
			return e.Str + "_" + e.Field
		}
		return "integer"
	case KMeta:
		switch e.Key {
		case "mark":
			return tMark
		case "iifname", "oifname", "ibrname", "obrname":
			return tIfname
		case "iif", "oif":
			return "iface_index"
		case "l4proto":
			return tProto
		case "nfproto":
			return tNfproto
		case "protocol":
			return tEther
		case "pkttype":
			return "pkt_type"
		case "iiftype", "oiftype":
			return "iface_type"
		case "skuid":
			return "uid"
		case "skgid":
			return "gid"
		case "iifgroup", "oifgroup":
			return "devgroup"
		case "length", "cpu", "random", "cgroup":
			return "integer"
		}
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
		case "l3proto":
			return tNfproto
		case "protocol":
			return tProto
		case "proto-src", "proto-dst":
			return tPort
		case "ip saddr", "ip daddr":
			return tAddr
		case "ip6 saddr", "ip6 daddr":
			return tAddr6
		case "label":
			return "ct_label"
		case "expiration":
			return "time"
		case "zone", "bytes", "packets", "avgpkt", "id":
			return "integer"
		}
	case KFib:
		switch e.Field {
		case "type":
			return "fib_addrtype"
		case "oif":
			return "iface_index"
		case "oifname":
			return tIfname
		}
	case KNumgen, KHash:
		return "integer"
	}
	return ""
}
