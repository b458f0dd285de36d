package nftables

import (
	"fmt"
	"strconv"
	"strings"
)

// The text parser's state: the token stream it reads, its errors and warnings, and the allocation of the model
// it builds.

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
