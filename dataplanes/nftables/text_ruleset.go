package nftables

import (
	"fmt"
	"strconv"
	"strings"
)

// Parsing tables, chains, sets and maps and their elements.

func (p *textParser) ruleset() error {
	first := true
	for {
		t := p.peek()
		switch {
		case t.kind == tkEOF:
			return nil
		case t.kind == tkNewline || t.kind == tkComment:
			p.next()
		case t.is("table"):
			p.next()
			p.tableBlock(t.pos)
			first = false
		case first && (t.is("chain") || t.is("set") || t.is("map")) && p.startsBlock(t):
			// A paste that starts inside a table (its "table … {" line cut off, as an issue's excerpt is): its
			// chains and sets are read into a table of unknown name, of family ip (what iptables-nft and
			// kube-proxy use); its end, "}" of that table, closes it.
			tb := &Table{Family: "ip", Name: FragmentTable, Cut: "the input starts inside it (its table line is cut off)", chains: map[string]*Chain{}, sets: map[string]*Set{}}
			p.tables[tb.Family+" "+tb.Name] = tb
			p.rs.Tables = append(p.rs.Tables, tb)
			p.tableBody(tb)
			first = false
		case first:
			return fmt.Errorf("nft list ruleset: line %d: expected \"table\", found %q", p.line(t.pos), p.src[t.pos:t.end])
		case t.kind == tkRBrace:
			p.warn(t.pos, "} outside a table")
			p.next()
		default:
			p.warn(t.pos, "%q outside a table: left out", p.src[t.pos:t.end])
			p.skipLine()
		}
	}
}

// tableBlock reads "table FAMILY NAME { … }" (after "table").
func (p *textParser) tableBlock(at int) {
	family, name, ok := p.header(2)
	if !ok {
		p.warn(at, "table without a family and name: left out")
		p.skipLine()
		return
	}
	t := &Table{Family: family, Name: name, chains: map[string]*Chain{}, sets: map[string]*Set{}}
	t.Handle = p.handleComment()
	key := family + " " + name
	if p.tables[key] != nil {
		p.warn(at, "table %s listed twice: the second is left out", key)
		t = &Table{Family: family, Name: name, chains: map[string]*Chain{}, sets: map[string]*Set{}} // read, then dropped
	} else {
		p.tables[key] = t
		p.rs.Tables = append(p.rs.Tables, t)
	}
	p.tableBody(t)
}

// tableBody reads a table's chains, sets and maps up to its "}".
func (p *textParser) tableBody(t *Table) {
	p.table, p.chain = t, ""
	defer func() { p.table = nil }()
	for {
		tok := p.peek()
		switch {
		case tok.kind == tkEOF:
			p.warn(tok.pos, "the table does not end")
			if t.Cut == "" {
				t.Cut = cutHere
			}
			return
		case tok.kind == tkNewline || tok.kind == tkComment:
			p.next()
		case tok.kind == tkRBrace:
			p.next()
			return
		case tok.is("comment"):
			p.next()
			if s := p.peek(); s.kind == tkString {
				p.next()
				t.Comment = s.text
			}
			p.skipLine()
		case tok.is("chain"):
			p.next()
			p.chainBlock(t, tok.pos)
		case tok.is("set") || tok.is("map"):
			p.next()
			p.setBlock(t, tok.text == "map", tok.pos)
		case tok.is("flags"), tok.is("counter"), tok.is("quota"), tok.is("limit"), tok.is("ct"),
			tok.is("flowtable"), tok.is("secmark"), tok.is("synproxy"), tok.is("tunnel"), tok.is("meter"):
			// Table flags and stateful objects: not part of a packet's path here (ParseRuleset skips them too).
			p.skipLine()
		default:
			p.warn(tok.pos, "%q in a table is not understood: left out", p.src[tok.pos:tok.end])
			p.skipLine()
		}
	}
}

// startsBlock says whether the chain/set/map word t opens a block: a name, then "{".
func (p *textParser) startsBlock(t token) bool {
	n := p.peekAfter(t)
	if n.kind != tkWord && n.kind != tkString {
		return false
	}
	return scan(p.src, n.end).kind == tkLBrace
}

// FragmentTable names the table of a listing that starts inside one (its "table" line cut off).
const FragmentTable = "(table cut off)"

// header reads n names and the "{" that opens a block; ok is false when they are not there.
func (p *textParser) header(n int) (a, b string, ok bool) {
	var names [2]string
	for i := 0; i < n; i++ {
		t := p.peek()
		if t.kind != tkWord && t.kind != tkString {
			return "", "", false
		}
		p.next()
		names[i] = t.text
	}
	if t := p.peek(); t.kind != tkLBrace {
		return "", "", false
	}
	p.next()
	return names[0], names[1], true
}

func (p *textParser) chainBlock(t *Table, at int) {
	name, _, ok := p.header(1)
	if !ok {
		p.warn(at, "chain without a name: left out")
		p.skipLine()
		return
	}
	c := &Chain{Name: name, Handle: p.handleComment()}
	if t.chains[name] != nil {
		p.warn(at, "chain %q listed twice: the second is left out", name)
	} else {
		t.chains[name] = c
		t.Chains = append(t.Chains, c)
	}
	p.chain = name
	p.ruleBuf = p.ruleBuf[:0]
	defer func() {
		c.Rules = p.ruleLists.copyOf(p.ruleBuf)
		clear(p.ruleBuf)
		if c.Hook != "" && c.Policy == "" {
			c.Policy = "accept" // as ParseRuleset: the default policy
		}
		p.chain = ""
	}()
	for {
		tok := p.peek()
		switch {
		case tok.kind == tkEOF:
			p.warn(tok.pos, "the chain does not end")
			c.Cut = cutHere
			return
		case tok.kind == tkNewline || tok.kind == tkComment:
			p.next()
		case tok.kind == tkRBrace:
			p.next()
			return
		case tok.is("comment") && p.peekAfter(tok).kind == tkString:
			// The chain's comment line (a rule's comment comes after its statements).
			p.next()
			c.Comment = p.next().text
			p.skipLine()
		case tok.is("type") || tok.is("policy"):
			p.chainHeader(t, c)
		case tok.is("flags"):
			p.skipLine()
		default:
			r := p.rule()
			if p.peek().kind == tkEOF && !lineEnded(p.src) {
				// The input stops in the middle of this line: what is printed of the rule may be only its
				// start (`tcp dport 80 counter` of `… dnat to 10.0.0.1`), so it is left out, not guessed at.
				p.warn(tok.pos, "the input ends inside this rule: left out (cut?)")
				continue
			}
			p.ruleBuf = append(p.ruleBuf, r)
		}
	}
}

// chainHeader reads "type filter hook input [device D | devices = { … }] priority P; policy accept;".
func (p *textParser) chainHeader(t *Table, c *Chain) {
	at := p.peek().pos
	if err := p.try(func() { p.chainHeaderWords(t, c) }); err != nil {
		p.warn(at, "chain header not understood (%s)", err.msg)
		p.skipLine()
	}
}

func (p *textParser) chainHeaderWords(t *Table, c *Chain) {
	for {
		tok := p.peek()
		if tok.kind == tkRBrace {
			return // the end of a chain's spec in a transaction: { type nat hook output priority -100 ; }
		}
		p.next()
		switch {
		case tok.kind == tkNewline || tok.kind == tkEOF:
			return
		case tok.kind == tkSemicolon || tok.kind == tkComment:
		case tok.is("comment"):
			c.Comment = p.expect(tkString, "a comment").text
		case tok.is("type"):
			c.Type = p.word("a chain type")
		case tok.is("hook"):
			c.Hook = p.word("a hook")
		case tok.is("device"):
			c.Device = p.word("a device")
		case tok.is("devices"):
			// ParseRuleset reads a list of devices as no device (its JSON "dev" is then an array).
			p.expectWord("=")
			var devs []string
			p.expect(tkLBrace, "{")
			for t := p.next(); t.kind != tkRBrace; t = p.next() {
				if t.endsLine() {
					p.fail("devices do not end")
				}
				if t.kind == tkWord || t.kind == tkString {
					devs = append(devs, t.text)
				}
			}
			if len(devs) == 1 {
				c.Device = devs[0]
			}
		case tok.is("priority"):
			var words []string
			for w := p.peek(); w.kind == tkWord; w = p.peek() {
				words = append(words, p.next().text)
			}
			prio, ok := chainPriority(t.Family, words)
			if !ok {
				p.fail("priority %q", strings.Join(words, " "))
			}
			c.Prio = prio
		case tok.is("policy"):
			c.Policy = p.word("a policy")
		default:
			p.fail("%q", p.src[tok.pos:tok.end])
		}
	}
}

// chainPriority converts a printed priority ("dstnat", "raw - 5", "filter + 10", "-100") to its number, by
// nft's table of standard priorities (the bridge family has its own).
func chainPriority(family string, words []string) (int, bool) {
	if len(words) == 0 {
		return 0, false
	}
	base, err := strconv.Atoi(words[0])
	if err != nil {
		var ok bool
		if family == "bridge" {
			base, ok = bridgePriorities[words[0]]
		} else {
			base, ok = standardPriorities[words[0]]
		}
		if !ok {
			return 0, false
		}
	}
	switch {
	case len(words) == 1:
		return base, true
	case len(words) == 3 && (words[1] == "+" || words[1] == "-"):
		off, err := strconv.Atoi(words[2])
		if err != nil {
			return 0, false
		}
		if words[1] == "-" {
			off = -off
		}
		return base + off, true
	}
	return 0, false
}

var standardPriorities = map[string]int{"raw": -300, "mangle": -150, "dstnat": -100, "filter": 0, "security": 50,
	"srcnat": 100}
var bridgePriorities = map[string]int{"dstnat": -300, "filter": -200, "out": 100, "srcnat": 300}

func (p *textParser) setBlock(t *Table, isMap bool, at int) {
	name, _, ok := p.header(1)
	kind := "set"
	if isMap {
		kind = "map"
	}
	if !ok || strings.HasPrefix(name, "@") { // rules refer to it as @NAME
		p.warn(at, "%s without a name: left out", kind)
		p.skipLine()
		return
	}
	s := &Set{Name: name, Map: isMap, Handle: p.handleComment()}
	defer func() {
		// A default timeout implies the timeout flag; nft then leaves "flags timeout" out of the text.
		if p.setTimeout && !hasFlag(s.Flags, "timeout") {
			s.Flags = jsonSetFlags(append(s.Flags, "timeout"))
		}
		p.setTimeout = false
	}()
	if t.sets[name] != nil {
		p.warn(at, "%s %q listed twice: the second is left out", kind, name)
	} else {
		t.sets[name] = s
		t.Sets = append(t.Sets, s)
	}
	for {
		tok := p.peek()
		switch {
		case tok.kind == tkEOF:
			p.warn(tok.pos, "%s %s does not end", kind, name)
			s.Cut = cutHere
			return
		case tok.kind == tkNewline || tok.kind == tkComment:
			p.next()
		case tok.kind == tkRBrace:
			p.next()
			return
		default:
			p.setLine(s, tok)
		}
	}
}

// setLine reads one line of a set's declaration.
func (p *textParser) setLine(s *Set, tok token) {
	if err := p.try(func() { p.setAttribute(s, tok) }); err != nil {
		p.warn(tok.pos, "set %s: %s", s.Name, err.msg)
	}
	// size, gc-interval, policy, auto-merge, counter, …: not part of the model.
	p.skipLine()
}

func (p *textParser) setAttribute(s *Set, tok token) {
	p.next()
	switch {
	case tok.is("type"):
		s.Type = p.typeNames()
		if s.Map {
			if t := p.peek(); t.is(":") {
				p.next()
				s.DataType = p.typeNames()
			}
		}
	case tok.is("typeof"):
		s.Type = p.typeofTypes(tok.pos)
		if s.Map {
			if t := p.peek(); t.is(":") {
				p.next()
				if w := p.peek(); w.kind == tkWord && datatypeWords[w.text] {
					s.DataType = p.typeNames()
				} else {
					s.DataType = p.typeofTypes(w.pos)
				}
			}
		}
	case tok.is("flags"):
		var flags []string
		for {
			w := p.peek()
			if w.kind == tkWord {
				flags = append(flags, p.next().text)
			} else if w.kind != tkComma {
				break
			} else {
				p.next()
			}
		}
		s.Flags = jsonSetFlags(flags)
	case tok.is("timeout"):
		secs, ok := timeSeconds(p.word("a timeout"))
		if !ok {
			p.fail("timeout not understood")
		}
		s.Timeout, p.setTimeout = secs, true
	case tok.is("comment"):
		s.Comment = p.expect(tkString, "a comment").text
	case tok.is("elements"):
		p.expectWord("=")
		p.elements(s)
	}
}

// datatypeWords are the data types a map's value may be given by name even after typeof.
var datatypeWords = map[string]bool{"verdict": true, "counter": true, "quota": true, "limit": true, "ct_helper": true,
	"ct_timeout": true, "ct_expectation": true, "secmark": true, "synproxy": true}

// typeNames reads "ipv4_addr . inet_proto . inet_service".
func (p *textParser) typeNames() []string {
	var out []string
	for {
		out = append(out, p.word("a data type"))
		if !p.peek().is(".") {
			return out
		}
		p.next()
	}
}

// typeofTypes reads "typeof ip saddr . tcp dport" and returns the data types nft's JSON names for it.
func (p *textParser) typeofTypes(at int) []string {
	key := p.concat(selectorMode)
	parts := []*Expr{key}
	if key.Kind == KConcat {
		parts = key.Args
	}
	out := make([]string, len(parts))
	for i, x := range parts {
		if out[i] = typeofDatatype(x); out[i] == "" {
			p.warn(at, "the data type of typeof %s is not known", renderExpr(x, tOther))
		}
	}
	return out
}

// elements reads "{ e, e : v, … }" of a named set or map (possibly over several lines). An element it cannot
// read is left out with a warning, and so are the ones after it: the rest of the block is skipped.
func (p *textParser) elements(s *Set) {
	open := p.expect(tkLBrace, "{")
	n := len(s.Elems)
	if err := p.try(func() { p.elementList(s) }); err != nil {
		p.seek(open.pos)
		if !p.skipBlock() {
			// The input ends inside the elements: the last one read may be cut short (10.0.0.1 of
			// 10.0.0.12), so it is left out too, and a lookup that finds nothing cannot say the key is not there.
			if len(s.Elems) > n {
				s.Elems = s.Elems[:len(s.Elems)-1]
			}
			p.warn(open.pos, "set %s: the input ends inside its elements (cut?): %d read", s.Name, len(s.Elems))
			s.Cut = cutHere
			return
		}
		p.warn(open.pos, "set %s: elements from the %d. on left out: %s", s.Name, len(s.Elems)+1, err.msg)
		s.Cut = "elements from the " + strconv.Itoa(len(s.Elems)+1) + ". on are not understood: " + err.msg
	}
}

func (p *textParser) elementList(s *Set) {
	for {
		p.skipNewlines()
		if p.peek().kind == tkRBrace {
			p.next()
			return
		}
		e := p.element(literalMode)
		var el Element
		if e.Kind == KPair {
			el.Key, el.Value = e.Args[0], e.Args[1]
		} else {
			el.Key = e
		}
		if el.Key.Kind == KElem {
			el.Comment, el.Timeout, el.Expires = el.Key.Comment, el.Key.Timeout, el.Key.Expires
			el.Key = el.Key.Args[0]
		}
		if s.Map != (el.Value != nil) {
			p.fail("element %d: a map's elements have values, a set's do not", len(s.Elems)+1)
		}
		s.Elems = append(s.Elems, el)
		p.skipNewlines()
		switch t := p.next(); t.kind {
		case tkComma:
		case tkRBrace:
			return
		default:
			p.fail("expected , or } after an element, found %q", p.src[t.pos:t.end])
		}
	}
}

// jsonSetFlags orders set flags as nft's JSON does (the text prints "dynamic" before "interval").
func jsonSetFlags(flags []string) []string {
	if len(flags) == 0 {
		return nil
	}
	out := make([]string, 0, len(flags))
	for _, f := range []string{"constant", "interval", "timeout", "dynamic"} {
		for _, g := range flags {
			if g == f {
				out = append(out, f)
				break
			}
		}
	}
	for _, g := range flags {
		switch g {
		case "constant", "interval", "timeout", "dynamic":
		default:
			out = append(out, g)
		}
	}
	return out
}
