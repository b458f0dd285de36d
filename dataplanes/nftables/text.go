package nftables

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseText parses the output of `nft list ruleset` (with or without -a handles, counters or -s) into the
// model ParseRuleset builds from `nft -j list ruleset` of the same ruleset: the same tables, chains, sets and
// elements, and rules with the same statements and Text. It is the cheap way to read a node: nft prints text
// about twice as fast as JSON, and this parser reads it in one pass.
//
// Where the two differ, the text has more: nft 1.0.6's JSON leaves out table and chain comments, chain
// devices and the "dynamic" set flag, and ParseText keeps them. The text has no version (Version stays
// empty), and a statement's Raw is its text as nft printed it rather than its JSON. Handles are 0 when the
// text has no "# handle N" comments.
//
// Statements the model knows are parsed into it; statements nft prints that the tracer does not model (dup,
// fwd, tproxy, meter, ct count, …) become SUnknown statements named as their JSON is; text that is not
// understood at all becomes an SUnknown statement plus a Warning. It never panics; the error is only for
// input that is not nft's ruleset listing.
//
// The expressions of the result may share identical leaves (the same *Expr for every "meta l4proto"): treat
// them as read-only, as the walk does.
func ParseText(text string) (rs *Ruleset, err error) {
	defer func() {
		// Belt and braces: a parser bug must not take the caller down.
		if r := recover(); r != nil {
			rs, err = nil, fmt.Errorf("nft list ruleset: internal error: %v", r)
		}
	}()
	p := newTextParser(text)
	if err := p.ruleset(); err != nil {
		return nil, err
	}
	return p.rs, nil
}

// ---- tokens ----

type tokKind uint8

const (
	tkEOF     tokKind = iota
	tkNewline         // one or more line ends (with the blanks between them)
	tkWord            // names, numbers, addresses, keywords, operators: anything up to a blank or delimiter
	tkString          // "…": text is what is between the quotes
	tkLBrace
	tkRBrace
	tkLParen
	tkRParen
	tkComma
	tkSemicolon
	tkComment // from # to the end of the line: text is what follows the #
)

type token struct {
	kind     tokKind
	text     string
	pos, end int // byte offsets of the token in the source
}

func (t token) is(word string) bool { return t.kind == tkWord && t.text == word }

// endsLine says whether t ends a rule (nft prints one rule a line; a comment is its "# handle N").
func (t token) endsLine() bool {
	return t.kind == tkEOF || t.kind == tkNewline || t.kind == tkComment
}

// scan reads the token at pos. nft separates words with blanks and prints operators as words of their own
// (" . ", " : ", " | ", " == "), so a word runs to the next blank or delimiter; a word may hold '.', ':', '/'
// and '-' (addresses, prefixes, ranges, chain names).
func scan(src string, pos int) token {
	for pos < len(src) && (src[pos] == ' ' || src[pos] == '\t' || src[pos] == '\r') {
		pos++
	}
	if pos >= len(src) {
		return token{kind: tkEOF, pos: pos, end: pos}
	}
	single := func(k tokKind) token { return token{kind: k, text: src[pos : pos+1], pos: pos, end: pos + 1} }
	switch src[pos] {
	case '\n':
		end := pos + 1
		for end < len(src) && (src[end] == '\n' || src[end] == ' ' || src[end] == '\t' || src[end] == '\r') {
			end++
		}
		return token{kind: tkNewline, pos: pos, end: end}
	case '{':
		return single(tkLBrace)
	case '}':
		return single(tkRBrace)
	case '(':
		return single(tkLParen)
	case ')':
		return single(tkRParen)
	case ',':
		return single(tkComma)
	case ';':
		return single(tkSemicolon)
	case '"':
		// nft prints strings without escapes; a string never spans lines.
		end := pos + 1
		for end < len(src) && src[end] != '"' && src[end] != '\n' {
			end++
		}
		t := token{kind: tkString, text: src[pos+1 : end], pos: pos, end: end}
		if end < len(src) && src[end] == '"' {
			t.end++
		}
		return t
	case '#':
		end := pos + 1
		for end < len(src) && src[end] != '\n' {
			end++
		}
		return token{kind: tkComment, text: src[pos+1 : end], pos: pos, end: end}
	}
	end := pos
	for end < len(src) {
		c := src[end]
		if c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '{' || c == '}' || c == '(' || c == ')' ||
			c == ';' || c == '"' || c == '#' {
			break
		}
		// A raw payload expression (@nh,16,16) is one word; elsewhere a comma separates.
		if c == ',' && !(src[pos] == '@' && end+1 < len(src) && isDigit(src[end+1])) {
			break
		}
		end++
	}
	return token{kind: tkWord, text: src[pos:end], pos: pos, end: end}
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// ---- parser state ----

// textParser is a recursive-descent parser over the listing. It reads tokens straight from the source (one
// token of lookahead is cached), so the only allocations are the model's.
type textParser struct {
	src     string
	pos     int // where the next token starts scanning
	peeked  token
	peekAt  int // pos the cached token was scanned at, -1 when none
	peeked2 token
	peek2At int // the same for the token after it (peekAfter)
	lastEnd int // end of the last token consumed

	rs         *Ruleset
	tables     map[string]*Table
	setTimeout bool // the set being read has a default timeout

	// where we are, for warnings
	table *Table
	chain string

	// The model is cut from blocks (a 5,000-Service ruleset is some 100,000 expressions) and identical leaves
	// are shared.
	exprs     arena[Expr]
	stmts     arena[Stmt]
	rules     arena[Rule]
	exprLists arena[*Expr]
	stmtLists arena[*Stmt]
	ruleLists arena[*Rule]
	exprStack []*Expr // the arguments being collected (nested lists use the part above their mark)
	stmtBuf   []*Stmt // the statements of the rule being read
	ruleBuf   []*Rule // the rules of the chain being read
	numbers   map[uint64]*Expr
	strs      map[string]*Expr
	leaves    map[leafKey]*Expr
}

// arena hands out objects and slices cut from larger blocks, so that building the model makes few
// allocations.
type arena[T any] struct{ block []T }

func (a *arena[T]) new() *T {
	if len(a.block) == 0 {
		a.block = make([]T, 256)
	}
	x := &a.block[0]
	a.block = a.block[1:]
	return x
}

// copyOf returns a copy of items (nil when empty, as a slice the JSON parser never appended to).
func (a *arena[T]) copyOf(items []T) []T {
	if len(items) == 0 {
		return nil
	}
	if len(a.block) < len(items) {
		a.block = make([]T, max(1024, len(items)))
	}
	out := a.block[:len(items):len(items)]
	copy(out, items)
	a.block = a.block[len(items):]
	return out
}

// args returns the expressions pushed on exprStack above mark, and pops them.
func (p *textParser) args(mark int) []*Expr {
	out := p.exprLists.copyOf(p.exprStack[mark:])
	clear(p.exprStack[mark:])
	p.exprStack = p.exprStack[:mark]
	return out
}

func (p *textParser) args1(a *Expr) []*Expr {
	mark := len(p.exprStack)
	p.exprStack = append(p.exprStack, a)
	return p.args(mark)
}

func (p *textParser) args2(a, b *Expr) []*Expr {
	mark := len(p.exprStack)
	p.exprStack = append(p.exprStack, a, b)
	return p.args(mark)
}

// syntaxError is panicked by the parsers (fail) and recovered by try, around a statement (which then becomes
// an unknown one), a chain header, a line of a set or a set's elements.
type syntaxError struct{ msg string }

func (p *textParser) fail(format string, args ...any) {
	panic(syntaxError{fmt.Sprintf(format, args...)})
}

// try runs parse and returns the syntax error that stopped it, if any (the parser is then where the error
// was found); the expressions it had collected for lists are dropped.
func (p *textParser) try(parse func()) (err *syntaxError) {
	stack := len(p.exprStack)
	defer func() {
		if r := recover(); r != nil {
			se, ok := r.(syntaxError)
			if !ok {
				panic(r)
			}
			clear(p.exprStack[stack:])
			p.exprStack = p.exprStack[:stack]
			err = &se
		}
	}()
	parse()
	return nil
}

// peek returns the next token without consuming it. The parser calls it for almost every decision, so it is
// kept small enough to be inlined.
func (p *textParser) peek() token {
	if p.peekAt != p.pos {
		p.fill()
	}
	return p.peeked
}

func (p *textParser) fill() {
	if p.peek2At == p.pos {
		p.peeked = p.peeked2
	} else {
		p.peeked = scan(p.src, p.pos)
	}
	p.peekAt = p.pos
}

// peekAfter is the token after t.
func (p *textParser) peekAfter(t token) token {
	if p.peek2At != t.end {
		p.peeked2 = scan(p.src, t.end)
		p.peek2At = t.end
	}
	return p.peeked2
}

func (p *textParser) next() token {
	if p.peekAt != p.pos {
		p.fill()
	}
	p.pos = p.peeked.end
	if p.peeked.kind > tkNewline && p.peeked.kind != tkComment {
		p.lastEnd = p.peeked.end
	}
	return p.peeked
}

// seek moves back to (or on to) the token at pos.
func (p *textParser) seek(pos int) {
	p.pos = pos
	p.peekAt, p.peek2At = -1, -1
}

func (p *textParser) line(pos int) int { return strings.Count(p.src[:pos], "\n") + 1 }

func (p *textParser) warn(at int, format string, args ...any) {
	if len(p.rs.Warnings) >= maxWarnings {
		return // counting lines is not free
	}
	where := fmt.Sprintf("line %d", p.line(at))
	if p.table != nil {
		where += ": " + p.table.Family + " " + p.table.Name
		if p.chain != "" {
			where += " " + p.chain
		}
	}
	p.rs.warn("%s: %s", where, fmt.Sprintf(format, args...))
}

// word consumes a word (or a quoted string: names may be quoted) and returns its text.
func (p *textParser) word(what string) string {
	t := p.peek()
	if t.kind != tkWord && t.kind != tkString {
		p.fail("expected %s, found %q", what, p.src[t.pos:t.end])
	}
	p.next()
	return t.text
}

func (p *textParser) expectWord(w string) {
	if t := p.peek(); !t.is(w) {
		p.fail("expected %q, found %q", w, p.src[t.pos:t.end])
	}
	p.next()
}

func (p *textParser) expect(k tokKind, what string) token {
	t := p.peek()
	if t.kind != k {
		p.fail("expected %s, found %q", what, p.src[t.pos:t.end])
	}
	return p.next()
}

func (p *textParser) skipNewlines() {
	for t := p.peek(); t.kind == tkNewline; t = p.peek() {
		p.next()
	}
}

// skipLine consumes the rest of the line, and whole blocks ({ … }) that start on it.
func (p *textParser) skipLine() {
	depth := 0
	for {
		t := p.peek()
		switch t.kind {
		case tkEOF:
			return
		case tkNewline:
			if depth == 0 {
				p.next()
				return
			}
		case tkLBrace:
			depth++
		case tkRBrace:
			if depth == 0 {
				return // the enclosing block's end
			}
			depth--
		}
		p.next()
	}
}

// skipBlock consumes a { … } block (at its "{"); closed is false when the input ends inside it.
func (p *textParser) skipBlock() (closed bool) {
	depth := 0
	for {
		t := p.next()
		switch t.kind {
		case tkEOF:
			return false
		case tkLBrace:
			depth++
		case tkRBrace:
			if depth--; depth <= 0 {
				return true
			}
		}
	}
}

// cutHere is the Cut of a block the input ends inside.
const cutHere = "the input ends inside it (cut?)"

// lineEnded says whether src ends with a line end (blanks aside): a paste cut in the middle of a line does not.
func lineEnded(src string) bool {
	return strings.HasSuffix(strings.TrimRight(src, " \t\r"), "\n")
}

// handleComment reads an optional "# handle N" and the end of the line.
func (p *textParser) handleComment() int {
	h := 0
	if t := p.peek(); t.kind == tkComment {
		p.next()
		h = handleOf(t.text)
	}
	if t := p.peek(); t.kind == tkNewline {
		p.next()
	}
	return h
}

func handleOf(comment string) int {
	s, ok := strings.CutPrefix(strings.TrimSpace(comment), "handle ")
	if !ok {
		return 0
	}
	h, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return 0
	}
	return h
}

// ---- expressions allocation ----

func (p *textParser) newExpr(kind string) *Expr {
	e := p.exprs.new()
	e.Kind = kind
	return e
}

func (p *textParser) newStmt(kind string) *Stmt {
	s := p.stmts.new()
	s.Kind = kind
	return s
}

// num and str return the shared literal.
func (p *textParser) num(n uint64) *Expr {
	e := p.numbers[n]
	if e == nil {
		e = p.newExpr(KNumber)
		e.Num = n
		p.numbers[n] = e
	}
	return e
}

func (p *textParser) str(s string) *Expr {
	e := p.strs[s]
	if e == nil {
		e = p.newExpr(KString)
		e.Str = s
		p.strs[s] = e
	}
	return e
}

// leafKey names a leaf expression (no arguments) other than a number or string: payload, meta, ct, verdicts,
// booleans.
type leafKey struct{ kind, str, field, key, dir string }

// leaf returns the shared expression for k. A 5,000-Service ruleset repeats "meta l4proto", "tcp" and 80
// tens of thousands of times; sharing them keeps the model a fraction of its size.
func (p *textParser) leaf(k leafKey) *Expr {
	if e, ok := p.leaves[k]; ok {
		return e
	}
	e := p.newExpr(k.kind)
	e.Str, e.Field, e.Key, e.Dir = k.str, k.field, k.key, k.dir
	if k.kind == KBool {
		e.Str, e.Bool = "", k.str == "exists" // exists, missing
	}
	p.leaves[k] = e
	return e
}

func (p *textParser) binop(op string, l, r *Expr) *Expr {
	e := p.newExpr(KBinop)
	e.Op, e.Args = op, p.args2(l, r)
	return e
}

// unknownExpr is an expression the model does not know, kept as the text nft printed (ParseRuleset keeps
// the JSON of such expressions).
func (p *textParser) unknownExpr(from int) *Expr {
	e := p.newExpr(KUnknown)
	e.Raw = p.src[from:p.lastEnd]
	return e
}

// ---- ruleset, tables, chains, sets ----

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

// ---- rules and statements ----

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

// ---- expressions ----

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
