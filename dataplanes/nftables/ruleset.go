package nftables

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
)

// Ruleset is a node's nftables ruleset as `nft -j list ruleset` (ParseRuleset) or `nft list ruleset`
// (ParseText) reports it: tables with their chains, rules, sets and maps. It implements netfilter.Ruleset (see walk.go) for the tables of family ip and inet.
type Ruleset struct {
	Tables []*Table
	// Skip names tables the walk leaves out ("nat", or "ip nat" for one family only): the iptables-nft tables
	// when the node runs iptables (another engine walks those) and our own tracing tables. Leave sets it as the
	// tracer does.
	Skip map[string]bool
	// Version is the nft version that printed the ruleset, when its metainfo says.
	Version string
	// Warnings are the parts of the input that were not understood (they were left out).
	Warnings []string
	// pasted: the ruleset is a pasted dump, which may be a part of a node's ruleset (see gaps).
	pasted bool
}

// checkLoops refuses a ruleset whose chains jump or go to each other in a circle, through rules or verdict
// maps. The kernel refuses to load one (ELOOP), so no node has it, and a walk through it would not end.
func (rs *Ruleset) checkLoops() error {
	for _, t := range rs.Tables {
		targets := map[string][]string{}
		var verdicts func(c string, e *Expr, depth int)
		verdicts = func(c string, e *Expr, depth int) {
			if e == nil || depth > 64 {
				return
			}
			if e.Kind == KVerdict && e.Target != "" {
				targets[c] = append(targets[c], e.Target)
			}
			if e.Kind == KSetRef {
				if s := t.Set(e.Str); s != nil {
					for _, el := range s.Elems {
						if el.Value != nil && el.Value.Kind == KVerdict && el.Value.Target != "" {
							targets[c] = append(targets[c], el.Value.Target)
						}
					}
				}
			}
			for _, a := range e.Args {
				verdicts(c, a, depth+1)
			}
		}
		for _, c := range t.Chains {
			for _, r := range c.Rules {
				for _, s := range r.Stmts {
					if s.Kind == SVerdict && s.Target != "" {
						targets[c.Name] = append(targets[c.Name], s.Target)
					}
					if s.Kind == SVmap {
						verdicts(c.Name, s.Right, 0)
					}
				}
			}
		}
		const (
			unseen = iota
			open
			done
		)
		state := map[string]int{}
		var path []string
		var visit func(c string) error
		visit = func(c string) error {
			state[c] = open
			path = append(path, c)
			for _, next := range targets[c] {
				if t.Chain(next) == nil {
					continue
				}
				switch state[next] {
				case open:
					i := slices.Index(path, next)
					loop := append(slices.Clone(path[i:]), next)
					return fmt.Errorf("the rules loop: %s %s %s (the kernel refuses to load such a ruleset)", t.Family, t.Name, strings.Join(loop, " -> "))
				case unseen:
					if err := visit(next); err != nil {
						return err
					}
				}
			}
			path = path[:len(path)-1]
			state[c] = done
			return nil
		}
		for _, c := range t.Chains {
			if state[c.Name] == unseen {
				if err := visit(c.Name); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// Leave sets Skip as the walk of a node's ruleset needs it: the tables other engines walk already (covered:
// "nat", or "ip nat" for one family only) and the tracing tables `trace --verify` adds.
func (rs *Ruleset) Leave(covered map[string]bool) {
	rs.Skip = map[string]bool{}
	for t := range covered {
		rs.Skip[t] = true
	}
	for _, t := range rs.Tables {
		if strings.HasPrefix(t.Name, netfilter.TraceTablePrefix) {
			rs.Skip[t.Name] = true
		}
	}
}

// Table is one nftables table.
type Table struct {
	Family  string
	Name    string
	Handle  int
	Comment string
	Chains  []*Chain
	Sets    []*Set // sets and maps, in listing order
	// Cut says why the input may not hold all of the table (a pasted listing that ends inside it): chains and
	// sets it does not show may exist.
	Cut string

	chains map[string]*Chain
	sets   map[string]*Set
}

// Chain is one chain; Hook is empty for a regular (non-base) chain.
type Chain struct {
	Name    string
	Handle  int
	Type    string // filter, nat, route
	Hook    string // prerouting, input, forward, output, postrouting, ingress, …
	Prio    int
	Policy  string // accept or drop; "" for a regular chain
	Device  string
	Comment string
	Rules   []*Rule
	// Cut says why the input may not hold all of the chain's rules (it ends inside the chain; a transaction
	// adds rules to a chain it does not create): a walk that reaches the end of Rules cannot say what comes
	// next.
	Cut string
	// headUnknown: rules the input does not show may come before Rules (see Cut): a walk cannot enter it.
	headUnknown bool
}

// IsBase says whether the chain is attached to a hook.
func (c *Chain) IsBase() bool { return c.Hook != "" }

// Rule is one rule: its statements in order, its comment and its text as nft prints it.
type Rule struct {
	Handle  int
	Comment string
	Stmts   []*Stmt
	// Text is the rule as `nft list ruleset` prints it, without the trailing "# handle N" (rendered from the
	// JSON when no text listing was given or the listing lacks the rule).
	Text string
}

// Set is a named set or map.
type Set struct {
	Name     string
	Handle   int
	Map      bool
	Type     []string // key datatypes ("ipv4_addr", "inet_proto", "inet_service")
	DataType []string // a map's value datatypes ("verdict"; "ipv4_addr", "inet_service")
	Flags    []string
	Timeout  int // seconds; 0 when the set has no default timeout
	Comment  string
	Elems    []Element
	// Cut says why the input may not hold all of the elements: a lookup that finds nothing cannot say the key
	// is not there.
	Cut string

	ixOnce sync.Once
	ix     *setIndex
}

// Kind is "set" or "map" (for the reader).
func (s *Set) Kind() string {
	if s.Map {
		return "map"
	}
	return "set"
}

// Element is one element of a set or map.
type Element struct {
	Key     *Expr
	Value   *Expr // maps only
	Comment string
	Timeout int // seconds, when the element has its own
	Expires int // seconds left, for elements of sets with timeouts
}

// Expression kinds.
const (
	KString  = "string"  // a literal string: an address, a name, a symbolic constant
	KNumber  = "number"  // a literal number
	KBool    = "bool"    // true/false (fib … exists / missing)
	KList    = "list"    // a JSON array literal: flag values such as ct state established,related
	KSetRef  = "setref"  // @name
	KPayload = "payload" // ip saddr, th dport, raw @nh,…
	KMeta    = "meta"
	KCt      = "ct"
	KFib     = "fib"
	KNumgen  = "numgen"
	KHash    = "hash" // jhash / symhash
	KConcat  = "concat"
	KSet     = "set"  // anonymous set: Args are its elements (pairs for maps)
	KPair    = "pair" // a map element inside an anonymous map: Args[0] key, Args[1] value
	KMap     = "map"  // lookup: Args[0] key, Args[1] data (anonymous set of pairs, or setref)
	KPrefix  = "prefix"
	KRange   = "range"
	KBinop   = "binop"
	KElem    = "elem" // element wrapper with options: Args[0] value
	KVerdict = "verdict"
	KUnknown = "unknown"
)

// Expr is one expression of the JSON schema (libnftables-json(5)).
type Expr struct {
	Kind string
	// Str is a string literal, a verdict (accept, goto, …), a set name (setref, without @), a payload's
	// protocol (ip, th, tcp), a ct expression's address family (ct original ip saddr), or the hash
	// (jhash/symhash).
	Str  string
	Num  uint64 // number literal (Neg set when negative); a hash's seed
	Neg  bool
	Bool bool

	Field  string   // payload field (saddr, dport); fib result (type, oif)
	Key    string   // meta/ct key (l4proto, mark, state, status)
	Dir    string   // ct direction ("original"/"reply")
	Flags  []string // fib flags; list literal values
	Base   string   // raw payload base
	Offset uint64   // raw payload offset; numgen/hash offset
	Len    int      // raw payload length; prefix length
	Mode   string   // numgen mode
	Mod    uint64   // numgen/hash modulus
	Op     string   // binop operator: & | ^ << >>
	Target string   // jump/goto target
	Args   []*Expr
	// Comment, Timeout and Expires of an element wrapper.
	Comment string
	Timeout int
	Expires int
	Raw     string // for kinds the tracer does not understand: the JSON (ParseRuleset) or the text (ParseText)
}

// Statement kinds.
const (
	SMatch      = "match"
	SVerdict    = "verdict" // accept drop continue return jump goto queue
	SVmap       = "vmap"
	SMangle     = "mangle"
	SCounter    = "counter"
	SLog        = "log"
	SLimit      = "limit"
	SQuota      = "quota"
	SDNAT       = "dnat"
	SSNAT       = "snat"
	SMasquerade = "masquerade"
	SRedirect   = "redirect"
	SReject     = "reject"
	SNotrack    = "notrack"
	SSetUpdate  = "set" // add/update @set { … }
	SXt         = "xt"  // an iptables-nft match or target that nft cannot show
	SUnknown    = "unknown"
)

// Stmt is one statement of a rule.
type Stmt struct {
	Kind string
	Op   string // match operator (==, !=, in, <, …); set statement operation (add, update, delete)
	// match: Left op Right; mangle: Left set Right; vmap: Left vmap Right; set statement: Left is the element
	Left, Right *Expr
	Verdict     string // SVerdict: accept, drop, continue, return, jump, goto, queue
	Target      string // jump/goto target; set statement's set name (without @)
	Family      string // nat family (dnat ip to …)
	Addr, Port  *Expr  // nat
	Flags       []string
	RejectType  string // icmp, tcp reset, icmpx
	RejectCode  string // port-unreachable, …
	Name        string // xt name; log prefix
	Raw         string // the statement's JSON (ParseRuleset) or its text as nft printed it (ParseText)
}

// ParseRuleset parses the output of `nft -j list ruleset`. text, when not empty, is the output of
// `nft -a list ruleset` on the same ruleset: each rule then takes its exact text from it by handle. It never
// panics; parts it does not understand are left out and named in Warnings.
func ParseRuleset(jsonData []byte, text string) (rs *Ruleset, err error) {
	defer func() {
		// Belt and braces: a parser bug must not take the caller down.
		if r := recover(); r != nil {
			rs, err = nil, fmt.Errorf("nft -j list ruleset: internal error: %v", r)
		}
	}()
	dec := json.NewDecoder(bytes.NewReader(jsonData))
	dec.UseNumber()
	var top map[string]any
	if err := dec.Decode(&top); err != nil {
		return nil, fmt.Errorf("nft -j list ruleset: %w", err)
	}
	items, ok := top["nftables"].([]any)
	if !ok {
		return nil, fmt.Errorf("nft -j list ruleset: no \"nftables\" array")
	}
	rs = &Ruleset{}
	texts := parseText(text)
	tables := map[string]*Table{}
	table := func(family, name string) *Table {
		t := tables[family+" "+name]
		if t == nil {
			rs.warn("%s %s: object of a table that was not listed", family, name)
		}
		return t
	}
	for _, it := range items {
		obj, ok := it.(map[string]any)
		if !ok {
			rs.warn("item %s: not an object", short(it))
			continue
		}
		for kind, v := range obj {
			o, _ := v.(map[string]any)
			switch kind {
			case "metainfo":
				rs.Version = str(o["version"])
			case "table":
				if o == nil {
					rs.warn("table %s: not an object", short(v))
					continue
				}
				t := &Table{Family: str(o["family"]), Name: str(o["name"]), Handle: integer(o["handle"]),
					Comment: str(o["comment"]), chains: map[string]*Chain{}, sets: map[string]*Set{}}
				if t.Name == "" {
					rs.warn("table without a name")
					continue
				}
				key := t.Family + " " + t.Name
				if tables[key] != nil {
					rs.warn("table %s listed twice", key)
					continue
				}
				tables[key] = t
				rs.Tables = append(rs.Tables, t)
			case "chain":
				if o == nil {
					rs.warn("chain %s: not an object", short(v))
					continue
				}
				t := table(str(o["family"]), str(o["table"]))
				if t == nil {
					continue
				}
				c := &Chain{Name: str(o["name"]), Handle: integer(o["handle"]), Type: str(o["type"]),
					Hook: str(o["hook"]), Prio: integer(o["prio"]), Policy: str(o["policy"]), Device: str(o["dev"]),
					Comment: str(o["comment"])}
				if c.Name == "" || t.chains[c.Name] != nil {
					rs.warn("%s %s: chain %q without a name or listed twice", t.Family, t.Name, c.Name)
					continue
				}
				if c.Hook != "" && c.Policy == "" {
					c.Policy = "accept"
				}
				t.chains[c.Name] = c
				t.Chains = append(t.Chains, c)
			case "set", "map":
				if o == nil {
					rs.warn("%s %s: not an object", kind, short(v))
					continue
				}
				t := table(str(o["family"]), str(o["table"]))
				if t == nil {
					continue
				}
				s := parseSet(kind == "map", o)
				if s.Name == "" || t.sets[s.Name] != nil {
					rs.warn("%s %s: %s %q without a name or listed twice", t.Family, t.Name, kind, s.Name)
					continue
				}
				t.sets[s.Name] = s
				t.Sets = append(t.Sets, s)
			case "rule":
				if o == nil {
					rs.warn("rule %s: not an object", short(v))
					continue
				}
				t := table(str(o["family"]), str(o["table"]))
				if t == nil {
					continue
				}
				c := t.chains[str(o["chain"])]
				if c == nil {
					rs.warn("%s %s: rule of unknown chain %q", t.Family, t.Name, str(o["chain"]))
					continue
				}
				r := &Rule{Handle: integer(o["handle"]), Comment: str(o["comment"])}
				exprs, _ := o["expr"].([]any)
				for _, e := range exprs {
					r.Stmts = append(r.Stmts, parseStmt(e))
				}
				if s, ok := texts[textKey{t.Family, t.Name, r.Handle}]; ok && r.Handle != 0 {
					r.Text = s
				} else {
					r.Text = RenderRule(r)
				}
				c.Rules = append(c.Rules, r)
			default:
				// flowtables, stateful objects, ct helpers, …: not part of a packet's path here.
			}
		}
	}
	return rs, nil
}

// maxWarnings bounds Warnings: a broken input must not make an unbounded list.
const maxWarnings = 100

func (rs *Ruleset) warn(format string, args ...any) {
	if len(rs.Warnings) < maxWarnings {
		rs.Warnings = append(rs.Warnings, fmt.Sprintf(format, args...))
	}
}

// Table returns the table family/name, nil when there is none.
func (rs *Ruleset) Table(family, name string) *Table {
	for _, t := range rs.Tables {
		if t.Family == family && t.Name == name {
			return t
		}
	}
	return nil
}

// Chain returns the chain of that name, nil when there is none.
func (t *Table) Chain(name string) *Chain {
	if t.chains == nil {
		t.index()
	}
	return t.chains[name]
}

// Set returns the set or map of that name (with or without the leading @), nil when there is none.
func (t *Table) Set(name string) *Set {
	if t.sets == nil {
		t.index()
	}
	return t.sets[strings.TrimPrefix(name, "@")]
}

// index builds the lookup maps of a table made by hand rather than by ParseRuleset.
func (t *Table) index() {
	t.chains = map[string]*Chain{}
	for _, c := range t.Chains {
		t.chains[c.Name] = c
	}
	t.sets = map[string]*Set{}
	for _, s := range t.Sets {
		t.sets[s.Name] = s
	}
}

func parseSet(isMap bool, o map[string]any) *Set {
	s := &Set{Name: str(o["name"]), Handle: integer(o["handle"]), Map: isMap, Comment: str(o["comment"]),
		Timeout: integer(o["timeout"])}
	s.Type = typeList(o["type"])
	if isMap {
		s.DataType = typeList(o["map"])
	}
	s.Flags = strList(o["flags"])
	elems, _ := o["elem"].([]any)
	for _, e := range elems {
		var el Element
		if isMap {
			pair, ok := e.([]any)
			if !ok || len(pair) != 2 {
				continue
			}
			el.Key = parseExpr(pair[0])
			el.Value = parseExpr(pair[1])
		} else {
			el.Key = parseExpr(e)
		}
		if el.Key.Kind == KElem {
			el.Comment, el.Timeout, el.Expires = el.Key.Comment, el.Key.Timeout, el.Key.Expires
			if len(el.Key.Args) == 1 {
				el.Key = el.Key.Args[0]
			}
		}
		s.Elems = append(s.Elems, el)
	}
	return s
}

// typeList reads a set's "type" or a map's "map": "ipv4_addr", ["ipv4_addr", "inet_service"], or a string
// with " . " between the parts.
func typeList(v any) []string {
	switch t := v.(type) {
	case string:
		var out []string
		for _, p := range strings.Split(t, ".") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		return out
	case []any:
		var out []string
		for _, x := range t {
			if s, ok := x.(string); ok {
				out = append(out, s)
			} else {
				out = append(out, "")
			}
		}
		return out
	}
	return nil
}

func strList(v any) []string {
	switch t := v.(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, x := range t {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

func str(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case json.Number:
		return t.String()
	}
	return ""
}

func integer(v any) int {
	switch t := v.(type) {
	case json.Number:
		if i, err := t.Int64(); err == nil && i >= math.MinInt32 && i <= math.MaxInt32 {
			return int(i)
		}
	case string:
		if i, err := strconv.Atoi(t); err == nil {
			return i
		}
	case float64:
		if t >= math.MinInt32 && t <= math.MaxInt32 {
			return int(t)
		}
	}
	return 0
}

func short(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "?"
	}
	if len(b) > 80 {
		return string(b[:77]) + "..."
	}
	return string(b)
}

// decodeObject decodes a JSON object with exact numbers; nil when it is not one.
func decodeObject(s string) map[string]any {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var o map[string]any
	if dec.Decode(&o) != nil {
		return nil
	}
	return o
}

func raw(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "?"
	}
	return string(b)
}

// parseExpr turns one JSON expression into an Expr; it never fails (unknown shapes become KUnknown).
func parseExpr(v any) *Expr {
	switch t := v.(type) {
	case string:
		if strings.HasPrefix(t, "@") {
			return &Expr{Kind: KSetRef, Str: strings.TrimPrefix(t, "@")}
		}
		return &Expr{Kind: KString, Str: t}
	case json.Number:
		return parseNumber(t.String())
	case float64:
		return parseNumber(strconv.FormatFloat(t, 'f', -1, 64))
	case bool:
		return &Expr{Kind: KBool, Bool: t}
	case []any:
		e := &Expr{Kind: KList}
		for _, x := range t {
			switch s := x.(type) {
			case string:
				e.Flags = append(e.Flags, s)
			default:
				e.Args = append(e.Args, parseExpr(x))
			}
		}
		if len(e.Args) > 0 {
			// A list of non-strings (not a flag list): keep the strings as elements too.
			for _, f := range e.Flags {
				e.Args = append(e.Args, &Expr{Kind: KString, Str: f})
			}
			e.Flags = nil
		}
		return e
	case map[string]any:
		if len(t) != 1 {
			return &Expr{Kind: KUnknown, Raw: raw(v)}
		}
		for k, val := range t {
			return parseObject(k, val)
		}
	}
	return &Expr{Kind: KUnknown, Raw: raw(v)}
}

func parseNumber(s string) *Expr {
	e := &Expr{Kind: KNumber}
	if strings.HasPrefix(s, "-") {
		e.Neg = true
		s = s[1:]
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return &Expr{Kind: KUnknown, Raw: s}
	}
	e.Num = n
	return e
}

func parseObject(k string, val any) *Expr {
	o, _ := val.(map[string]any)
	unknown := func() *Expr { return &Expr{Kind: KUnknown, Raw: raw(map[string]any{k: val})} }
	switch k {
	case "payload":
		if o == nil {
			return unknown()
		}
		if _, ok := o["base"]; ok {
			return &Expr{Kind: KPayload, Base: str(o["base"]), Offset: uint64(max(integer(o["offset"]), 0)), Len: integer(o["len"])}
		}
		return &Expr{Kind: KPayload, Str: str(o["protocol"]), Field: str(o["field"])}
	case "meta":
		if o == nil {
			return unknown()
		}
		return &Expr{Kind: KMeta, Key: str(o["key"])}
	case "ct":
		if o == nil {
			return unknown()
		}
		return &Expr{Kind: KCt, Key: str(o["key"]), Dir: str(o["dir"]), Str: str(o["family"])}
	case "fib":
		if o == nil {
			return unknown()
		}
		return &Expr{Kind: KFib, Field: str(o["result"]), Flags: strList(o["flags"])}
	case "numgen":
		if o == nil {
			return unknown()
		}
		return &Expr{Kind: KNumgen, Mode: str(o["mode"]), Mod: uint64(max(integer(o["mod"]), 0)), Offset: uint64(max(integer(o["offset"]), 0))}
	case "jhash", "symhash":
		if o == nil {
			return unknown()
		}
		e := &Expr{Kind: KHash, Str: k, Mod: uint64(max(integer(o["mod"]), 0)), Offset: uint64(max(integer(o["offset"]), 0))}
		if n, ok := o["seed"].(json.Number); ok {
			if seed, err := strconv.ParseUint(n.String(), 10, 64); err == nil {
				e.Num = seed
			}
		}
		if x, ok := o["expr"]; ok {
			e.Args = []*Expr{parseExpr(x)}
		}
		return e
	case "concat":
		l, ok := val.([]any)
		if !ok {
			return unknown()
		}
		e := &Expr{Kind: KConcat}
		for _, x := range l {
			e.Args = append(e.Args, parseExpr(x))
		}
		return e
	case "set":
		e := &Expr{Kind: KSet}
		l, ok := val.([]any)
		if !ok {
			// A one-element set may be printed bare.
			l = []any{val}
		}
		for _, x := range l {
			if pair, ok := x.([]any); ok && len(pair) == 2 {
				e.Args = append(e.Args, &Expr{Kind: KPair, Args: []*Expr{parseExpr(pair[0]), parseExpr(pair[1])}})
				continue
			}
			e.Args = append(e.Args, parseExpr(x))
		}
		return e
	case "map":
		if o == nil {
			return unknown()
		}
		return &Expr{Kind: KMap, Args: []*Expr{parseExpr(o["key"]), parseExpr(o["data"])}}
	case "prefix":
		if o == nil {
			return unknown()
		}
		return &Expr{Kind: KPrefix, Args: []*Expr{parseExpr(o["addr"])}, Len: integer(o["len"])}
	case "range":
		l, ok := val.([]any)
		if !ok || len(l) != 2 {
			return unknown()
		}
		return &Expr{Kind: KRange, Args: []*Expr{parseExpr(l[0]), parseExpr(l[1])}}
	case "&", "|", "^", "<<", ">>":
		l, ok := val.([]any)
		if !ok || len(l) != 2 {
			return unknown()
		}
		return &Expr{Kind: KBinop, Op: k, Args: []*Expr{parseExpr(l[0]), parseExpr(l[1])}}
	case "elem":
		if o == nil {
			return unknown()
		}
		return &Expr{Kind: KElem, Args: []*Expr{parseExpr(o["val"])}, Comment: str(o["comment"]),
			Timeout: integer(o["timeout"]), Expires: integer(o["expires"])}
	case "accept", "drop", "continue", "return":
		return &Expr{Kind: KVerdict, Str: k}
	case "jump", "goto":
		if o == nil {
			return unknown()
		}
		return &Expr{Kind: KVerdict, Str: k, Target: str(o["target"])}
	}
	return unknown()
}

func parseStmt(v any) *Stmt {
	obj, ok := v.(map[string]any)
	if !ok || len(obj) != 1 {
		return &Stmt{Kind: SUnknown, Raw: raw(v)}
	}
	for k, val := range obj {
		o, _ := val.(map[string]any)
		rawText := raw(v)
		switch k {
		case "match":
			if o == nil {
				break
			}
			op := str(o["op"])
			if op == "" {
				op = "=="
			}
			return &Stmt{Kind: SMatch, Op: op, Left: parseExpr(o["left"]), Right: parseExpr(o["right"]), Raw: rawText}
		case "accept", "drop", "continue", "return":
			return &Stmt{Kind: SVerdict, Verdict: k, Raw: rawText}
		case "jump", "goto":
			if o == nil {
				break
			}
			return &Stmt{Kind: SVerdict, Verdict: k, Target: str(o["target"]), Raw: rawText}
		case "queue":
			return &Stmt{Kind: SVerdict, Verdict: "queue", Raw: rawText}
		case "vmap":
			if o == nil {
				break
			}
			return &Stmt{Kind: SVmap, Left: parseExpr(o["key"]), Right: parseExpr(o["data"]), Raw: rawText}
		case "mangle":
			if o == nil {
				break
			}
			return &Stmt{Kind: SMangle, Left: parseExpr(o["key"]), Right: parseExpr(o["value"]), Raw: rawText}
		case "counter":
			return &Stmt{Kind: SCounter, Raw: rawText}
		case "log":
			s := &Stmt{Kind: SLog, Raw: rawText}
			if o != nil {
				s.Name = str(o["prefix"])
			}
			return s
		case "limit":
			return &Stmt{Kind: SLimit, Raw: rawText}
		case "quota":
			return &Stmt{Kind: SQuota, Raw: rawText}
		case "notrack":
			return &Stmt{Kind: SNotrack, Raw: rawText}
		case "dnat", "snat", "masquerade", "redirect":
			s := &Stmt{Kind: k, Raw: rawText}
			if o != nil {
				s.Family = str(o["family"])
				if a, ok := o["addr"]; ok {
					s.Addr = parseExpr(a)
				}
				if p, ok := o["port"]; ok {
					s.Port = parseExpr(p)
				}
				s.Flags = strList(o["flags"])
			} else if val != nil {
				break
			}
			return s
		case "reject":
			s := &Stmt{Kind: SReject, Raw: rawText}
			if o != nil {
				s.RejectType = str(o["type"])
				s.RejectCode = str(o["expr"])
			}
			return s
		case "set":
			if o == nil {
				break
			}
			return &Stmt{Kind: SSetUpdate, Op: str(o["op"]), Left: parseExpr(o["elem"]),
				Target: strings.TrimPrefix(str(o["set"]), "@"), Raw: rawText}
		case "xt":
			s := &Stmt{Kind: SXt, Raw: rawText}
			if o != nil {
				s.Name = str(o["type"]) + " " + str(o["name"])
			}
			return s
		}
		return &Stmt{Kind: SUnknown, Name: k, Raw: rawText}
	}
	return &Stmt{Kind: SUnknown, Raw: raw(v)}
}

type textKey struct {
	family, table string
	handle        int
}

// parseText reads `nft -a list ruleset` and returns each rule's text by table and handle.
func parseText(text string) map[textKey]string {
	out := map[textKey]string{}
	if text == "" {
		return out
	}
	var family, table string
	inChain := false
	for _, line := range strings.Split(text, "\n") {
		l := strings.TrimSpace(line)
		switch {
		case l == "":
		case strings.HasPrefix(l, "table "):
			f := strings.Fields(l)
			family, table, inChain = "", "", false
			if len(f) >= 3 {
				family, table = f[1], unquote(f[2])
			}
		case strings.HasPrefix(l, "chain ") && strings.Contains(l, "{"):
			inChain = true
		case l == "}":
			inChain = false
		case inChain:
			i := strings.LastIndex(l, "# handle ")
			if i < 0 {
				continue
			}
			h, err := strconv.Atoi(strings.TrimSpace(l[i+len("# handle "):]))
			if err != nil {
				continue
			}
			out[textKey{family, table, h}] = strings.TrimSpace(l[:i])
		}
	}
	return out
}

func unquote(s string) string {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		return s[1 : len(s)-1]
	}
	return s
}
