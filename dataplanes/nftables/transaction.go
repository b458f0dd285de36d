package nftables

import (
	"fmt"
	"slices"
	"strings"
)

// ParseTransaction parses an `nft -f` script of commands: what kube-proxy's nftables mode hands `nft -f`
// (through knftables) and its proxier_test.go prints:
//
//	add table ip kube-proxy { comment "rules for kube-proxy" ; }
//	add chain ip kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; }
//	add rule ip kube-proxy nat-prerouting jump services
//	add map ip kube-proxy service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; }
//	add element ip kube-proxy service-ips { 172.30.0.41 . tcp . 80 : goto service-ULMVA6XW-ns1/svc1/tcp/p80 }
//
// and flush, delete, destroy, create, insert and replace of the same objects. The commands are applied in
// order to the same model ParseText builds; rules and elements are read by ParseText's own parser.
//
// A transaction may change a ruleset it does not show (kube-proxy's partial syncs add rules and elements to
// chains and maps made by an earlier one): a chain it adds rules to without creating or flushing it, and a set
// or map it adds elements to without creating it, are marked Cut, so that a walk that needs what the input does
// not show ends unknown. It never panics; the error is only for input that is not a transaction.
func ParseTransaction(text string) (rs *Ruleset, err error) {
	defer func() {
		if r := recover(); r != nil {
			rs, err = nil, fmt.Errorf("nft -f transaction: internal error: %v", r)
		}
	}()
	p := newTextParser(text)
	if err := p.transaction(); err != nil {
		return nil, err
	}
	return p.rs, nil
}

func newTextParser(text string) *textParser {
	return &textParser{src: text, rs: &Ruleset{}, tables: map[string]*Table{}, numbers: map[uint64]*Expr{},
		strs: map[string]*Expr{}, leaves: map[leafKey]*Expr{}, peekAt: -1, peek2At: -1}
}

// txVerbs and txObjects start a transaction's commands.
var (
	txVerbs = map[string]bool{"add": true, "create": true, "insert": true, "replace": true, "delete": true,
		"destroy": true, "flush": true}
	txObjects = map[string]bool{"table": true, "chain": true, "rule": true, "set": true, "map": true,
		"element": true, "ruleset": true}
	families = map[string]bool{"ip": true, "ip6": true, "inet": true, "arp": true, "bridge": true, "netdev": true}
)

// looksLikeTransaction says whether text is an `nft -f` script of commands: its first line that is not a
// comment is one ("add table …", "flush chain …").
func looksLikeTransaction(text string) bool {
	l := firstLine(text)
	verb, rest, _ := strings.Cut(l, " ")
	obj, _, _ := strings.Cut(strings.TrimSpace(rest), " ")
	return txVerbs[verb] && txObjects[obj]
}

// firstLine is text's first line that is neither blank nor a comment, trimmed.
func firstLine(text string) string {
	for len(text) > 0 {
		l, rest, _ := strings.Cut(text, "\n")
		text = rest
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return l
		}
	}
	return ""
}

func (p *textParser) transaction() error {
	first := true
	for {
		t := p.peek()
		switch {
		case t.kind == tkEOF:
			return nil
		case t.kind == tkNewline || t.kind == tkComment || t.kind == tkSemicolon:
			p.next()
		case t.kind == tkWord && txVerbs[t.text] && txObjects[p.peekAfter(t).text]:
			p.next()
			if err := p.try(func() { p.command(t.text) }); err != nil {
				p.warn(t.pos, "`%s` not understood (%s): left out", p.lineAt(t.pos), err.msg)
				p.skipLine()
			}
			p.table, p.chain = nil, ""
			first = false
		case t.is("table"):
			// nft -f also reads a listing's blocks (a script that starts with "flush ruleset").
			p.next()
			p.tableBlock(t.pos)
			first = false
		case first:
			return fmt.Errorf("nft -f transaction: line %d: expected a command (add, insert, flush, delete …), found %q", p.line(t.pos), p.src[t.pos:t.end])
		case t.kind == tkRBrace:
			// skipLine stops before a "}" (a listing's block end); outside a block it is stray.
			p.warn(t.pos, "} outside a block")
			p.next()
		default:
			p.warn(t.pos, "`%s` is not a command: left out", p.lineAt(t.pos))
			p.skipLine()
		}
	}
}

// lineAt is the source line from pos on, for warnings.
func (p *textParser) lineAt(pos int) string {
	l, _, _ := strings.Cut(p.src[pos:], "\n")
	return strings.TrimSpace(l)
}

// command applies one command (after its verb).
func (p *textParser) command(verb string) {
	obj := p.next().text
	remove := verb == "delete" || verb == "destroy"
	if obj == "ruleset" {
		if remove || verb == "flush" {
			p.rs.Tables, p.tables = nil, map[string]*Table{}
		}
		p.endCommand()
		return
	}
	t := p.txTable(p.tableRef())
	p.table = t
	switch obj {
	case "table":
		switch {
		case remove:
			p.dropTable(t)
		case verb == "flush":
			for _, c := range t.Chains {
				c.Rules, c.Cut, c.headUnknown = nil, "", false
			}
			for _, s := range t.Sets {
				s.Elems, s.Cut = nil, ""
			}
		case p.peek().kind == tkLBrace:
			p.tableSpec(t)
		}
	case "chain":
		name := p.word("a chain name")
		p.chain = name
		c := t.chains[name]
		switch {
		case remove:
			if c != nil {
				t.Chains = slices.DeleteFunc(t.Chains, func(x *Chain) bool { return x == c })
				delete(t.chains, name)
			}
		case verb == "flush":
			// Whatever the chain held, it holds nothing now: what is added after is all of it.
			c = p.txChain(t, name)
			c.Rules, c.Cut, c.headUnknown = nil, "", false
		default:
			if c == nil {
				c = &Chain{Name: name}
				t.chains[name] = c
				t.Chains = append(t.Chains, c)
			}
			if p.peek().kind == tkLBrace {
				p.chainSpec(t, c)
			}
		}
	case "rule":
		p.ruleCommand(verb, t, p.word("a chain name"))
		return // the rule ran to the end of its line
	case "set", "map":
		name := p.setName()
		s := t.sets[name]
		switch {
		case remove:
			if s != nil {
				t.Sets = slices.DeleteFunc(t.Sets, func(x *Set) bool { return x == s })
				delete(t.sets, name)
			}
		case verb == "flush":
			if s != nil {
				s.Elems, s.Cut = nil, ""
			}
		default:
			if s == nil {
				s = &Set{Name: name}
				t.sets[name] = s
				t.Sets = append(t.Sets, s)
			}
			// The input creates it: what it adds is all it holds (as for a listing).
			s.Map, s.Cut = obj == "map", ""
			if p.peek().kind == tkLBrace {
				p.setSpec(s)
			}
		}
	case "element":
		p.elementCommand(remove, t, p.setName())
	}
	p.endCommand()
}

// setName reads a set's name: rules refer to it as @NAME, so it cannot start with "@" itself.
func (p *textParser) setName() string {
	name := p.word("a set name")
	if strings.HasPrefix(name, "@") {
		p.fail("set name %q", name)
	}
	return name
}

// endCommand reads the end of a command: its line's end, or a ";" before the next command.
func (p *textParser) endCommand() {
	switch t := p.peek(); t.kind {
	case tkEOF, tkNewline, tkComment:
		p.handleComment()
	case tkSemicolon:
		p.next()
	default:
		p.fail("%q after the command", p.src[t.pos:t.end])
	}
}

// tableRef reads "[FAMILY] NAME" (nft's default family is ip).
func (p *textParser) tableRef() (family, name string) {
	w := p.word("a table")
	if families[w] {
		if n := p.peek(); n.kind == tkWord || n.kind == tkString {
			return w, p.next().text
		}
	}
	return "ip", w
}

// txTable returns the table, made when the input has not created it (a transaction may add to a table made
// before it).
func (p *textParser) txTable(family, name string) *Table {
	key := family + " " + name
	t := p.tables[key]
	if t == nil {
		t = &Table{Family: family, Name: name, chains: map[string]*Chain{}, sets: map[string]*Set{}}
		p.tables[key] = t
		p.rs.Tables = append(p.rs.Tables, t)
	}
	return t
}

func (p *textParser) dropTable(t *Table) {
	p.rs.Tables = slices.DeleteFunc(p.rs.Tables, func(x *Table) bool { return x == t })
	delete(p.tables, t.Family+" "+t.Name)
}

// notCreated is the Cut of a chain a transaction adds rules to without creating or flushing it.
const notCreated = "the input adds rules to it without creating or flushing it: the rules it held before are not shown"

// txChain returns the chain of a rule command, made (and marked as not all shown) when the input has not
// created it.
func (p *textParser) txChain(t *Table, name string) *Chain {
	c := t.chains[name]
	if c == nil {
		c = &Chain{Name: name, Cut: notCreated, headUnknown: true}
		t.chains[name] = c
		t.Chains = append(t.Chains, c)
	}
	return c
}

// ruleCommand reads "CHAIN [position H | handle H | index I] RULE" (after the table) and applies verb.
func (p *textParser) ruleCommand(verb string, t *Table, chain string) {
	p.chain = chain
	c := p.txChain(t, chain)
	where, n := "", -1
	if w := p.peek(); w.is("position") || w.is("handle") || w.is("index") {
		p.next()
		where, n = w.text, int(min(p.number(), 1<<30))
	}
	at := func() int { // the index the rule command refers to, -1 when the input does not show it
		if where == "index" {
			if n < len(c.Rules) {
				return n
			}
			return -1
		}
		return slices.IndexFunc(c.Rules, func(r *Rule) bool { return r.Handle == n && n != 0 })
	}
	unsure := func(what string) {
		// The chain's rules are not what the input shows any more: where they are is not known.
		p.warn(p.peek().pos, "%s: the chain's rules are not known", what)
		c.Cut, c.headUnknown = "the input "+what+", which it does not show", true
	}
	switch verb {
	case "delete", "destroy":
		if i := at(); i >= 0 {
			c.Rules = slices.Delete(c.Rules, i, i+1)
		} else if verb == "delete" {
			unsure(fmt.Sprintf("deletes rule %s %d of chain %s", where, n, chain))
		}
		p.skipLine()
		return
	}
	r := p.rule()
	p.handleComment()
	switch {
	case where == "":
		if verb == "insert" {
			c.Rules = slices.Insert(c.Rules, 0, r)
		} else {
			c.Rules = append(c.Rules, r)
		}
	case at() < 0:
		unsure(fmt.Sprintf("puts a rule at %s %d of chain %s", where, n, chain))
		c.Rules = append(c.Rules, r)
	case verb == "replace":
		c.Rules[at()] = r
	case verb == "insert":
		c.Rules = slices.Insert(c.Rules, at(), r)
	default:
		c.Rules = slices.Insert(c.Rules, at()+1, r)
	}
}

// elementCommand reads "SET { elements }" (after the table) and adds or deletes them.
func (p *textParser) elementCommand(remove bool, t *Table, name string) {
	s := t.sets[name]
	if remove || s == nil {
		// Read into a set of their own: to delete, or to learn whether they are a map's.
		tmp := &Set{Name: name, Map: p.mapElementsAhead()}
		p.elements(tmp)
		switch {
		case remove && s != nil:
			for _, el := range tmp.Elems {
				k := renderExpr(el.Key, tOther)
				s.Elems = slices.DeleteFunc(s.Elems, func(x Element) bool { return renderExpr(x.Key, tOther) == k })
			}
		case !remove:
			tmp.Cut = "the input adds elements to it without creating it: the elements it held before are not shown"
			if tmp.Map {
				tmp.DataType = []string{"verdict"}
			}
			t.sets[name] = tmp
			t.Sets = append(t.Sets, tmp)
		}
		return
	}
	p.elements(s)
}

// mapElementsAhead says whether the element block ahead holds "key : value" pairs.
func (p *textParser) mapElementsAhead() bool {
	depth := 0
	for pos := p.pos; ; {
		t := scan(p.src, pos)
		switch {
		case t.kind == tkEOF:
			return false
		case t.kind == tkLBrace:
			depth++
		case t.kind == tkRBrace:
			if depth--; depth <= 0 {
				return false
			}
		case t.is(":") && depth == 1:
			return true
		}
		pos = t.end
	}
}

// tableSpec reads "{ comment "…" ; flags … ; }" of add table.
func (p *textParser) tableSpec(t *Table) {
	p.expect(tkLBrace, "{")
	for {
		tok := p.peek()
		switch {
		case tok.kind == tkRBrace:
			p.next()
			return
		case tok.kind == tkEOF:
			t.Cut = cutHere
			return
		case tok.kind == tkSemicolon || tok.kind == tkNewline || tok.kind == tkComment:
			p.next()
		case tok.is("comment") && p.peekAfter(tok).kind == tkString:
			p.next()
			t.Comment = p.next().text
		default:
			p.skipAttribute()
		}
	}
}

// chainSpec reads "{ type nat hook prerouting priority -100 ; policy accept ; comment "…" ; }" of add chain.
func (p *textParser) chainSpec(t *Table, c *Chain) {
	p.expect(tkLBrace, "{")
	defer func() {
		if c.Hook != "" && c.Policy == "" {
			c.Policy = "accept"
		}
	}()
	for {
		tok := p.peek()
		switch {
		case tok.kind == tkRBrace:
			p.next()
			return
		case tok.kind == tkEOF:
			c.Cut = cutHere
			return
		case tok.kind == tkSemicolon || tok.kind == tkNewline || tok.kind == tkComment:
			p.next()
		default:
			if err := p.try(func() { p.chainHeaderWords(t, c) }); err != nil {
				p.warn(tok.pos, "chain %s: %s", c.Name, err.msg)
				p.skipAttribute()
			}
		}
	}
}

// setSpec reads "{ type … ; flags … ; timeout … ; comment "…" ; elements = { … } ; }" of add set/map.
func (p *textParser) setSpec(s *Set) {
	p.expect(tkLBrace, "{")
	defer func() {
		// A default timeout implies the timeout flag (as in setBlock).
		if p.setTimeout && !hasFlag(s.Flags, "timeout") {
			s.Flags = jsonSetFlags(append(s.Flags, "timeout"))
		}
		p.setTimeout = false
	}()
	for {
		tok := p.peek()
		switch {
		case tok.kind == tkRBrace:
			p.next()
			return
		case tok.kind == tkEOF:
			s.Cut = cutHere
			return
		case tok.kind == tkSemicolon || tok.kind == tkNewline || tok.kind == tkComment:
			p.next()
		default:
			if err := p.try(func() { p.setAttribute(s, tok) }); err != nil {
				p.warn(tok.pos, "set %s: %s", s.Name, err.msg)
			}
			p.skipAttribute()
		}
	}
}

// skipAttribute consumes the rest of an attribute of a spec: up to ";", a line end or the spec's "}".
func (p *textParser) skipAttribute() {
	depth := 0
	for {
		t := p.peek()
		switch t.kind {
		case tkEOF:
			return
		case tkSemicolon, tkNewline:
			if depth == 0 {
				return
			}
		case tkLBrace:
			depth++
		case tkRBrace:
			if depth == 0 {
				return
			}
			depth--
		}
		p.next()
	}
}
