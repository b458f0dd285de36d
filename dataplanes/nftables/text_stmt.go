package nftables

import (
	"strings"
)

// Parsing rules and their statements.

func (p *textParser) rule() *Rule {
	r := p.rules.new()
	first := p.peek()
	p.stmtBuf = p.stmtBuf[:0]
	end := -1
	for {
		tok := p.peek()
		if tok.kind == tkEOF || tok.kind == tkNewline || tok.kind == tkRBrace {
			break
		}
		if tok.kind == tkComment {
			// "# handle N" ends the line; another comment before it is part of the rule's text, as
			// ParseRuleset takes the text before the last "# handle ".
			p.next()
			comment := p.src[tok.pos:tok.end]
			text := comment
			if i := strings.LastIndex(comment, "# handle "); i >= 0 {
				r.Handle = handleOf(comment[i+1:])
				text = comment[:i]
			}
			if text = strings.TrimRight(text, " \t"); text != "" {
				end = tok.pos + len(text)
			}
			continue
		}
		if tok.is("comment") {
			if s := p.peekAfter(tok); s.kind == tkString {
				p.next()
				p.next()
				r.Comment = s.text
				continue
			}
		}
		p.stmtBuf = append(p.stmtBuf, p.stmt())
		if p.pos == tok.pos {
			p.next() // cannot happen; but a statement must move the parser on
		}
	}
	if end < 0 {
		end = p.lastEnd
	}
	r.Text = p.src[first.pos:max(end, first.pos)]
	r.Stmts = p.stmtLists.copyOf(p.stmtBuf)
	clear(p.stmtBuf)
	return r
}

// stmt parses one statement; what it cannot parse becomes an unknown statement (with a warning) that runs
// to the next statement it can recognize.
func (p *textParser) stmt() *Stmt {
	start := p.peek()
	var s *Stmt
	if err := p.try(func() { s = p.parseStmt(start) }); err != nil {
		p.seek(start.pos)
		s = p.unknownStmt(start, "")
		p.warn(start.pos, "`%s` not understood (%s): the walk assumes it matches", s.Raw, err.msg)
		return s
	}
	s.Raw = p.src[start.pos:p.lastEnd]
	return s
}

// unknownStmtNames are the statements the model does not know, by their first words, with the name their JSON
// has (ParseRuleset names its unknown statements so).
var unknownStmtNames = map[string]string{"dup": "dup", "fwd": "fwd", "tproxy": "tproxy", "synproxy": "synproxy",
	"meter": "meter", "flow": "flow", "last": "last", "secmark": "secmark"}

func (p *textParser) parseStmt(start token) *Stmt {
	w := start.text
	if start.kind != tkWord {
		p.fail("a statement cannot start with %q", p.src[start.pos:start.end])
	}
	switch w {
	case "accept", "drop", "continue", "return":
		p.next()
		s := p.newStmt(SVerdict)
		s.Verdict = w
		return s
	case "jump", "goto":
		p.next()
		s := p.newStmt(SVerdict)
		s.Verdict, s.Target = w, p.word("a chain")
		return s
	case "queue":
		p.next()
		p.queueArgs()
		s := p.newStmt(SVerdict)
		s.Verdict = "queue"
		return s
	case "counter":
		p.next()
		p.counterArgs()
		return p.newStmt(SCounter)
	case "log":
		p.next()
		return p.logStmt()
	case "limit":
		p.next()
		p.skipWords(limitWord)
		return p.newStmt(SLimit)
	case "quota":
		p.next()
		p.skipWords(quotaWord)
		return p.newStmt(SQuota)
	case "notrack":
		p.next()
		return p.newStmt(SNotrack)
	case "dnat", "snat", "masquerade", "redirect":
		p.next()
		return p.natStmt(w)
	case "reject":
		p.next()
		return p.rejectStmt()
	case "add", "update", "delete":
		if p.peekAfter(start).kind == tkWord && strings.HasPrefix(p.peekAfter(start).text, "@") {
			p.next()
			return p.setStmt(w)
		}
	case "xt":
		p.next()
		s := p.newStmt(SXt)
		typ := p.word("an xt type")
		s.Name = typ + " " + p.word("an xt name")
		return s
	case "ct":
		if p.peekAfter(start).is("count") {
			return p.unknownStmt(start, "ct count")
		}
	}
	if name, ok := unknownStmtNames[w]; ok {
		return p.unknownStmt(start, name)
	}
	if !isSelector(w) {
		p.fail("%q is not a statement nft prints", w)
	}
	return p.exprStmt()
}

// strongKeywords start a statement wherever they stand: an unknown statement ends before them.
var strongKeywords = map[string]bool{"accept": true, "drop": true, "continue": true, "return": true, "jump": true,
	"goto": true, "queue": true, "counter": true, "log": true, "limit": true, "quota": true, "dnat": true,
	"snat": true, "masquerade": true, "redirect": true, "reject": true, "notrack": true}

// unknownStmt reads a statement the model does not know: from start to the next statement keyword outside
// braces, or the end of the rule (its line). Its Raw is that text.
func (p *textParser) unknownStmt(start token, name string) *Stmt {
	depth := 0
	for n := 0; ; n++ {
		t := p.peek()
		if t.endsLine() {
			break
		}
		if depth == 0 && n > 0 {
			if t.kind == tkRBrace || t.kind == tkWord && strongKeywords[t.text] {
				break
			}
			if t.is("comment") && p.peekAfter(t).kind == tkString {
				break
			}
		}
		switch t.kind {
		case tkLBrace, tkLParen:
			depth++
		case tkRBrace, tkRParen:
			if depth > 0 {
				depth--
			}
		}
		p.next()
	}
	s := p.newStmt(SUnknown)
	if name == "" {
		name = start.text
	}
	s.Name = name
	s.Raw = p.src[start.pos:max(p.lastEnd, start.pos)]
	return s
}

// exprStmt reads a statement that starts with an expression: a match (`ip daddr 10.0.0.1`), a mangle
// (`meta mark set …`) or a verdict map (`… vmap { … }`).
func (p *textParser) exprStmt() *Stmt {
	start := p.peek()
	left := p.concat(selectorMode)
	tok := p.peek()
	switch {
	case tok.is("set"):
		p.next()
		if left.Kind == KCt && (left.Key == "helper" || left.Key == "timeout" || left.Key == "expectation") {
			// ct helper set "name": an object reference, {"ct helper": "name"} in JSON.
			p.seek(start.pos)
			return p.unknownStmt(start, "ct "+left.Key)
		}
		s := p.newStmt(SMangle)
		s.Left, s.Right = left, p.valueList(selectorMode)
		return s
	case tok.is("vmap"):
		p.next()
		s := p.newStmt(SVmap)
		s.Left, s.Right = left, p.mapData()
		return s
	case tok.endsLine() || tok.kind == tkRBrace:
		p.fail("%s without a value", renderExpr(left, tOther))
	}
	s := p.newStmt(SMatch)
	s.Left = left
	if tok.kind == tkWord && relationalOps[tok.text] {
		p.next()
		s.Op = tok.text
	}
	s.Right = p.valueList(literalMode)
	if left.Kind == KCt && left.Key == "expiration" {
		s.Right = p.timeValue(s.Right)
	}
	if p.peek().is("/") {
		// tcp flags syn / syn,ack: the flags under the mask (after it) are the value (before it).
		p.next()
		s.Left = p.binop("&", left, p.valueList(literalMode))
		if s.Op == "" {
			s.Op = "=="
		}
	}
	if s.Op == "" {
		// nft's JSON calls an implicit match on a bitmask "in" (ct state established,related).
		s.Op = "=="
		if isBitmask(left) && s.Right.Kind != KSet && s.Right.Kind != KSetRef {
			s.Op = "in"
		}
	}
	return s
}

var relationalOps = map[string]bool{"==": true, "!=": true, "<": true, ">": true, "<=": true, ">=": true}

// isBitmask says whether e has one of nft's bitmask data types.
func isBitmask(e *Expr) bool {
	switch e.Kind {
	case KCt:
		return e.Key == "state" || e.Key == "status" || e.Key == "label" || e.Key == "event"
	case KPayload:
		return e.Str == "tcp" && e.Field == "flags"
	}
	return false
}

// timeValue converts a time literal ("30s", "1h2m") to seconds, as nft's JSON prints times.
func (p *textParser) timeValue(e *Expr) *Expr {
	if e.Kind == KString {
		if secs, ok := timeSeconds(e.Str); ok {
			return p.num(uint64(secs))
		}
	}
	return e
}

func (p *textParser) queueArgs() {
	for {
		t := p.peek()
		switch {
		case t.kind == tkComma:
		case t.is("to"):
			p.next()
			if n := p.peek(); n.kind == tkWord && isSelector(n.text) {
				p.concat(selectorMode) // queue to numgen … / symhash …
			}
			continue
		case t.kind == tkWord && (queueWords[t.text] || isDigit(t.text[0])):
		default:
			return
		}
		p.next()
	}
}

var queueWords = map[string]bool{"num": true, "flags": true, "bypass": true, "fanout": true}

// counterArgs reads "packets N bytes M" or "name X" (an object reference, maybe "name ip saddr map @m").
func (p *textParser) counterArgs() {
	switch t := p.peek(); {
	case t.is("packets"):
		p.next()
		p.word("packets")
		p.expectWord("bytes")
		p.word("bytes")
	case t.is("name"):
		p.next()
		if p.peek().kind == tkString {
			p.next()
			return
		}
		p.concat(selectorMode)
		if p.peek().is("map") {
			p.next()
			p.mapData()
		}
	}
}

func (p *textParser) logStmt() *Stmt {
	s := p.newStmt(SLog)
	for {
		t := p.peek()
		switch {
		case t.is("prefix"):
			p.next()
			s.Name = p.expect(tkString, "a log prefix").text
		case t.is("level") || t.is("group") || t.is("snaplen") || t.is("queue-threshold"):
			p.next()
			p.word(t.text)
		case t.is("flags"):
			p.next()
			for {
				f := p.peek()
				if f.kind != tkComma && !(f.kind == tkWord && logFlagWords[f.text]) {
					break
				}
				p.next()
			}
		default:
			return s
		}
	}
}

var logFlagWords = map[string]bool{"all": true, "tcp": true, "ip": true, "sequence": true, "options": true,
	"skuid": true, "ether": true}

// skipWords consumes the words (and commas) of a statement's arguments that ok accepts.
func (p *textParser) skipWords(ok func(string) bool) {
	for {
		t := p.peek()
		switch {
		case t.kind == tkString || t.kind == tkComma:
		case t.kind == tkWord && ok(t.text):
		default:
			return
		}
		p.next()
	}
}

// limitWord: "rate over 10/second burst 5 packets", "rate 1 mbytes/second", "name".
func limitWord(w string) bool {
	switch w {
	case "rate", "over", "until", "burst", "packets", "bytes", "kbytes", "mbytes", "name":
		return true
	}
	return isDigit(w[0]) || strings.Contains(w, "/")
}

// quotaWord: "over 10 mbytes used 0 bytes", "name".
func quotaWord(w string) bool {
	switch w {
	case "over", "until", "used", "bytes", "kbytes", "mbytes", "gbytes", "name":
		return true
	}
	return isDigit(w[0])
}

// natStmt reads the rest of dnat/snat/masquerade/redirect: [ip|ip6] [prefix] [to ADDR[:PORT] | to :PORT |
// to EXPR map DATA] [flags].
func (p *textParser) natStmt(kind string) *Stmt {
	s := p.newStmt(kind)
	if t := p.peek(); t.is("ip") || t.is("ip6") {
		if n := p.peekAfter(t); n.is("to") || n.is("prefix") || n.is("addr") {
			p.next()
			s.Family = t.text
		}
	}
	netmap := false
	if p.peek().is("prefix") {
		p.next()
		netmap = true // "prefix" is nft's netmap: JSON flags "netmap"
	}
	if p.peek().is("to") {
		p.next()
		p.natTarget(s)
	}
	for {
		t := p.peek()
		if t.kind == tkComma {
			p.next()
			continue
		}
		if t.kind != tkWord || !natFlags[t.text] {
			break
		}
		s.Flags = append(s.Flags, p.next().text)
	}
	if netmap && !hasFlag(s.Flags, "netmap") {
		s.Flags = append(s.Flags, "netmap")
	}
	return s
}

var natFlags = map[string]bool{"random": true, "fully-random": true, "persistent": true, "netmap": true}

// natTarget reads what follows "to".
func (p *textParser) natTarget(s *Stmt) {
	t := p.peek()
	if t.kind != tkWord {
		p.fail("nat target %q", p.src[t.pos:t.end])
	}
	if isSelector(t.text) {
		key := p.concat(selectorMode)
		p.expectWord("map")
		m := p.newExpr(KMap)
		m.Args = p.args2(key, p.mapData())
		s.Addr = m
		return
	}
	p.next()
	w := t.text
	var addr, port string
	switch {
	case strings.HasPrefix(w, ":"):
		port = w[1:]
	case strings.HasPrefix(w, "["):
		// [2001:db8::1]:80
		i := strings.Index(w, "]")
		if i < 0 {
			p.fail("nat address %q", w)
		}
		addr = w[1:i]
		if rest := w[i+1:]; rest != "" {
			port, _ = strings.CutPrefix(rest, ":")
		}
	case strings.Count(w, ":") == 1:
		addr, port, _ = strings.Cut(w, ":")
	default:
		addr = w // an IPv4 address, range or prefix, or an IPv6 one without a port
	}
	if addr != "" {
		s.Addr = p.literal(addr)
	}
	if port != "" {
		s.Port = p.literal(port)
	}
}

func (p *textParser) rejectStmt() *Stmt {
	s := p.newStmt(SReject)
	if !p.peek().is("with") {
		// nft prints the family's default as a bare reject.
		switch p.table.Family {
		case "ip":
			s.RejectType = "icmp"
		case "ip6":
			s.RejectType = "icmpv6"
		default:
			s.RejectType = "icmpx"
		}
		s.RejectCode = "port-unreachable"
		return s
	}
	p.next()
	typ := p.word("a reject type")
	if typ == "tcp" {
		p.expectWord("reset")
		s.RejectType = "tcp reset"
		return s
	}
	s.RejectType = typ
	if p.peek().is("type") {
		p.next() // older nft: "reject with icmp type host-unreachable"
	}
	s.RejectCode = p.word("a reject code")
	return s
}

// setStmt reads "add|update|delete @set { elem [timeout T] }" (after the operation).
func (p *textParser) setStmt(op string) *Stmt {
	start := p.peek()
	set := strings.TrimPrefix(p.next().text, "@")
	p.expect(tkLBrace, "{")
	elem := p.element(selectorMode)
	p.expect(tkRBrace, "}")
	if elem.Kind == KPair {
		// add @map { key : value } is a map statement: {"map": …} in JSON, not modelled.
		p.seek(start.pos)
		s := p.unknownStmt(start, "map")
		return s
	}
	s := p.newStmt(SSetUpdate)
	s.Op, s.Target, s.Left = op, set, elem
	return s
}
