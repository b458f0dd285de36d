package iptables

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// Rules is a node's iptables rules: tables by name.
type Rules struct {
	Tables map[string]*Table
	// Partial is true when the input was a fragment (no table header or no built-in chains), as when rules
	// are pasted from `iptables-save | grep …`.
	Partial bool
	// TableGuess says which table lines with no table named went to, and why ("" when every line had one).
	TableGuess string
	// Cut names the table the input ends inside (no COMMIT): its Cut chains may have had more rules.
	Cut string
	// Created holds, by "TABLE/CHAIN", when iptables-nft made its base chains (their nf_tables handles, see
	// HandlesKey), which orders them among nf_tables chains of equal priority; OrderUnknown says why a base chain
	// it lacks has no known creation (iptables-legacy numbers nothing; iptables-save shows no handles).
	Created      map[string]netfilter.Creation
	OrderUnknown string
	// Scope is the packet the rules were read for, chain by chain as its walk reached them (ScopeKey), "" for a
	// whole ruleset: a chain the rules jump to and do not hold was then not read, rather than missing from the
	// node, and a walk that reaches one records it (Unread) for the collector to read next.
	Scope string
	// scope, inside the node the rules were read in for one packet, reads the chains a walk reaches and they
	// lack (readChain).
	scope *dataplanes.Scope
	// unreadChains are the "TABLE/CHAIN"s walks reached and a scoped read lacked.
	unreadChains *chainSet
	// rules is where a dump's rules are made, a block at a time (newRule): one allocation per rule was 100,000
	// of them for a 5,000-Service dump.
	rules []Rule
	// ruleCount caches RuleCount once a walk asks it (0: not yet): the rules do not change after the parse,
	// and a command that waits for every Service walks the same rules once per Service.
	ruleCount int
}

// chainSet is a set of "TABLE/CHAIN"s that walks add to.
type chainSet struct {
	mu sync.Mutex
	m  map[string]bool
}

// unread records that a walk jumped to chain key ("TABLE/CHAIN"), which a scoped read lacks.
func (r *Rules) unread(key string) {
	if r.unreadChains == nil {
		return // set by Open with Scope; walks may run concurrently, so it is not made here
	}
	r.unreadChains.mu.Lock()
	defer r.unreadChains.mu.Unlock()
	r.unreadChains.m[key] = true
}

// Unread are the chains ("TABLE/CHAIN") walks of rules read for one packet reached and the read lacked, sorted:
// what the collector reads next (dataplanes.Scope.Want). Always empty for a whole ruleset.
func (r *Rules) Unread() []string {
	if r.unreadChains == nil {
		return nil
	}
	r.unreadChains.mu.Lock()
	defer r.unreadChains.mu.Unlock()
	return slices.Sorted(maps.Keys(r.unreadChains.m))
}

// newRule places v in the current block of rules and returns it.
func (r *Rules) newRule(v Rule) *Rule {
	if len(r.rules) == cap(r.rules) {
		r.rules = make([]Rule, 0, 1024)
	}
	r.rules = append(r.rules, v)
	return &r.rules[len(r.rules)-1]
}

// Table is one iptables table.
type Table struct {
	Name   string
	Chains map[string]*Chain
	Order  []string
	// lastRuled is the chain of the rule read last, where an elision line in save form belongs; elided says
	// the table had one (its chains printed without rules may have lost them there).
	lastRuled string
	elided    bool
	// afterElision is the elision line, from it to the next rule: that rule's chain may have lost its first rules.
	afterElision string
}

// Chain is a chain and its rules.
type Chain struct {
	Name   string
	Policy string // ACCEPT/DROP for built-in chains, "" for user chains
	Rules  []*Rule
	// Assumed is set for chains the input did not contain that kube-proxy always creates.
	Assumed bool
	// Cut is set for a chain whose rules may go on past where the input ends (see Rules.Cut).
	Cut bool
}

// Rule is one rule of a chain.
type Rule struct {
	// Text is the rule as the input showed it, without counters (`-A KUBE-SVC-… -m comment … -j KUBE-SEP-…`).
	// Read from iptables-save, it is a slice of the dump, not a copy.
	Text string
	// args are the rule's words after `-A CHAIN`, with quotes removed, when they are not Text's own (a listing's
	// rule is translated into them); nil for a save line, whose words Args splits from Text when asked: a walk
	// evaluates a few thousand of a 5,000-Service dump's 100,000 rules, and keeping every rule's words cost
	// more than the rest of the parse.
	args []string
	// skip is, for a save line, how many of Text's words come before the rule's own: 2 for `-A CHAIN`, 3 for
	// `-I CHAIN N`.
	skip uint8
	// jump is a save line's -j/-g target, read with its words (jumped says it was): the loop check asks it of
	// every rule.
	jump           string
	jumped         bool
	Packets, Bytes uint64
	Assumed        bool
	// Elided is set for the place where the paste left rules out ("...", "and more....."): a walk reaching it
	// does not know what they did.
	Elided bool
	// compiled is the rule ready for evaluation, made on its first walk: a walk meets every rule of
	// KUBE-SERVICES, and a node's rules are walked once per Service when a command waits for them.
	compiled *matcher
}

// Args are the rule's words after `-A CHAIN` (or `-I CHAIN N`), with quotes removed: split from Text each time
// for a save line (saveLine checked that it splits).
func (r *Rule) Args() []string {
	if r.args != nil || r.skip == 0 {
		return r.args
	}
	words, _ := Split(r.Text)
	return words[min(int(r.skip), len(words)):]
}

// target is the rule's -j/-g target, found without splitting a save line into a slice: the loop check and
// kube-proxy's completion ask it of every rule.
func (r *Rule) target() string {
	if r.args != nil || r.skip == 0 {
		return target(r.args)
	}
	if r.jumped {
		return r.jump
	}
	n, jump := 0, false
	for i := 0; ; n++ {
		w, next, ok := nextWord(r.Text, i)
		if !ok {
			return ""
		}
		i = next
		switch {
		case n < int(r.skip):
		case jump:
			return w
		default:
			jump = w == "-j" || w == "-g" || w == "--jump" || w == "--goto"
		}
	}
}

// matcher is the rule compiled, once. Not safe for concurrent walks of one ruleset.
func (r *Rule) matcher() *matcher {
	if r.compiled == nil {
		r.compiled = compile(r.Args())
		if c := r.compiled.comment; c != "" {
			r.compiled.service = trace.ServiceFromComment(c)
		}
		r.compiled.dst, r.compiled.dport = plainDst(r.compiled.conds), plainDport(r.compiled.conds)
	}
	return r.compiled
}

// plainDport is a rule's one port of a not negated tcp, udp or sctp `--dport` (0 when it has none).
func plainDport(conds []cond) uint16 {
	for _, c := range conds {
		if (c.module == "tcp" || c.module == "udp" || c.module == "sctp") && c.opt == "--dport" && !c.neg && len(c.vals) == 1 {
			if n, err := strconv.ParseUint(c.vals[0], 10, 16); err == nil && n > 0 {
				return uint16(n)
			}
		}
	}
	return 0
}

// plainDst is the prefix of a rule's one, not negated `-d` (invalid when it has none, or one of names).
func plainDst(conds []cond) netip.Prefix {
	for _, c := range conds {
		if c.module != "" || c.opt != "-d" || c.neg || len(c.vals) != 1 {
			continue
		}
		if p, err := netip.ParsePrefix(c.vals[0]); err == nil {
			return p.Masked()
		}
		if a, err := netip.ParseAddr(c.vals[0]); err == nil {
			return netip.PrefixFrom(a, a.BitLen())
		}
	}
	return netip.Prefix{}
}

// ParseSave reads iptables-save output (with or without -c counters, one table or all), a fragment of it,
// `iptables -S` output (-P and -N lines) or kube-proxy's iptables-restore input (-X, -F, -I). Lines before a
// `*table` line, and fragments with none, belong to the table their chains and targets show (guessTable).
func ParseSave(text string) (*Rules, error) { return parseSave(text, "", false) }

// parseSave is ParseSave with the table header-less lines belong to ("" to guess it from them); ended says
// the paste shows the output whole (another follows it), so an `iptables -S` output's last chains were not cut.
func parseSave(text, headerless string, ended bool) (*Rules, error) {
	r := &Rules{Tables: map[string]*Table{}}
	table := ""
	sawHeader, declaresBuiltin := false, false
	committed := map[string]bool{}
	var loose []string // header-less lines, read once their table is known
	var looseAt []int  // and their line numbers
	n := 0
	lastRuleTable := "" // the table of the last rule read (its chain is Table.lastRuled)
	// Lines are slices of text, which the rules keep as their Text: a 5,000-Service dump is 100,000 lines, and
	// a copy of each (bufio.Scanner's Text) was as much memory again as the dump.
	for rest := text; rest != ""; {
		var line string
		line, rest, _ = strings.Cut(rest, "\n")
		n++
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
			continue
		case line == "COMMIT":
			committed[table] = true
			continue
		case strings.HasPrefix(line, "*"):
			table = strings.TrimSpace(line[1:])
			if table == "" {
				return nil, fmt.Errorf("line %d: empty table name", n)
			}
			sawHeader = true
			r.table(table)
			continue
		}
		if table == "" {
			loose, looseAt = append(loose, line), append(looseAt, n)
			continue
		}
		if strings.HasPrefix(line, ":") && builtin(table, firstField(line[1:])) {
			declaresBuiltin = true
		}
		ruled, err := r.saveLine(table, line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if ruled != "" {
			lastRuleTable = table
		}
	}
	if len(loose) > 0 {
		// `iptables -S` states each built-in chain's policy (-P): a whole table, like a header.
		for _, line := range loose {
			if strings.HasPrefix(line, "-P ") {
				sawHeader, declaresBuiltin = true, true
			}
		}
		t := headerless
		if t == "" {
			var why string
			t, why = guessTable(loose, false)
			r.TableGuess = "table " + t + ": " + why
		}
		lastChain := ""
		for i, line := range loose {
			ruled, err := r.saveLine(t, line)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", looseAt[i], err)
			}
			if ruled != "" {
				lastChain = ruled // as saveLine read it: after the counters, unquoted (splitting the line again
				// with its "[p:b]" counters in front broke on a quote in them: FuzzParse's e0f62412ce28b547)
			}
		}
		// `iptables -S` prints every chain's -N first, then their rules chain by chain in the same order, and
		// no end mark: the chains declared after the last one printed, and that one's end, may be cut off,
		// unless the paste shows the output ended (another command's output follows it).
		if declaresBuiltin && lastChain != "" && !ended {
			tb := r.Tables[t]
			after := false
			for _, name := range tb.Order {
				c := tb.Chains[name]
				if name == lastChain {
					after, c.Cut = true, true
				} else if after && len(c.Rules) == 0 && !builtin(t, name) {
					c.Cut = true
				}
			}
		}
	}
	if len(r.Tables) == 0 {
		return nil, fmt.Errorf("no iptables rules in the input")
	}
	// A table whose COMMIT never came was cut (pasted from an issue, a terminal's scrollback): its last rule
	// may be cut mid-line, and what came after it is missing. That rule goes, and the chains it and the empty
	// chains declared before the cut were in are marked, so that a walk reaching their end says so.
	if sawHeader && table != "" && !committed[table] {
		t := r.Tables[table]
		r.Cut = table
		// The chain as saveLine read it (quotes removed: `-A "X"` is chain X).
		if c, ok := t.Chains[t.lastRuled]; ok && lastRuleTable == table && len(c.Rules) > 0 {
			c.Rules = c.Rules[:len(c.Rules)-1]
			c.Cut = true
		}
		for _, c := range t.Chains {
			c.Cut = c.Cut || len(c.Rules) == 0
		}
	}
	// A chain printed without rules in a table the paste left lines out of may have lost them there.
	for _, t := range r.Tables {
		if t.elided {
			for _, c := range t.Chains {
				c.Cut = c.Cut || len(c.Rules) == 0
			}
		}
	}
	// kube-proxy's restore input (and `iptables-save | grep`) holds its own chains, not the built-in ones
	// that jump to them: a fragment of the table.
	r.Partial = !sawHeader || !declaresBuiltin && r.HasKubeProxy() && !r.jumpsFromBuiltin()
	if r.Partial {
		r.completeKubeProxy()
	}
	return r, nil
}

// saveLine reads one line of a table: a chain declaration, a rule (-A, -I), or `iptables -S` / restore
// commands (-P, -N, -X, -F). ruled is the chain it added a rule to, if it did.
func (r *Rules) saveLine(table, line string) (ruled string, err error) {
	t := r.table(table)
	if dataplanes.Elision(line) {
		t.elided, t.afterElision = true, line
		if c, ok := t.Chains[t.lastRuled]; ok {
			c.Rules = append(c.Rules, &Rule{Text: line, Elided: true})
		}
		return "", nil
	}
	if strings.HasPrefix(line, ":") {
		f := strings.Fields(line[1:])
		if len(f) == 0 {
			return "", fmt.Errorf("empty chain declaration")
		}
		c := t.chain(f[0])
		if len(f) > 1 && f[1] != "-" {
			c.Policy = f[1]
		}
		return "", nil
	}
	var pk, by uint64
	if strings.HasPrefix(line, "[") {
		end := strings.IndexByte(line, ']')
		if end < 0 {
			return "", fmt.Errorf("unterminated counters")
		}
		a, b, _ := strings.Cut(line[1:end], ":")
		pk, _ = strconv.ParseUint(a, 10, 64)
		by, _ = strconv.ParseUint(b, 10, 64)
		line = strings.TrimSpace(line[end+1:])
	}
	// The first three words are all a line's reading needs; the rest are the rule's, split when a walk
	// evaluates it (Rule.Args). The whole line is checked here, so that a quote left open is refused at once.
	var words [3]string
	count := 0
	jump, jumped, jumpNext := "", false, false // the rule's target, as Rule.target finds it in its words
	for i := 0; ; count++ {
		w, next, ok, err := scanWord(line, i)
		if err != nil {
			return "", err
		}
		if !ok {
			break
		}
		if count < len(words) {
			words[count] = w
		}
		// The rule's words start at the third (-A CHAIN) or the fourth (-I CHAIN N, a number, never a jump).
		switch {
		case count < 2 || jumped:
		case jumpNext:
			jump, jumped = w, true
		default:
			jumpNext = w == "-j" || w == "-g" || w == "--jump" || w == "--goto"
		}
		i = next
	}
	jumped = true // no target: "" is the answer
	if count < 2 {
		return "", fmt.Errorf("not an iptables-save line: %q", truncate(line))
	}
	switch words[0] {
	case "-A", "--append":
		c := t.chain(words[1])
		if t.afterElision != "" && len(c.Rules) == 0 && t.lastRuled != c.Name {
			// A chain whose rules start right after an elision: its first rules may be among those left out.
			c.Rules = append(c.Rules, &Rule{Text: t.afterElision, Elided: true})
		}
		t.afterElision = ""
		c.Rules = append(c.Rules, r.newRule(Rule{Text: line, skip: 2, jump: jump, jumped: jumped, Packets: pk, Bytes: by}))
		t.lastRuled = c.Name
		return c.Name, nil
	case "-I", "--insert":
		// -I CHAIN [N] rule: N is 1-based, 1 when left out.
		c := t.chain(words[1])
		skip, at := uint8(2), 0
		if count > 2 {
			if v, err := strconv.Atoi(words[2]); err == nil && v >= 1 {
				skip, at = 3, min(v-1, len(c.Rules))
			}
		}
		c.Rules = slices.Insert(c.Rules, at, r.newRule(Rule{Text: line, skip: skip, jump: jump, jumped: jumped, Packets: pk, Bytes: by}))
		t.lastRuled = c.Name
		return c.Name, nil
	case "-P", "--policy":
		if count < 3 {
			return "", fmt.Errorf("policy without a verdict: %q", truncate(line))
		}
		t.chain(words[1]).Policy = words[2]
		return "", nil
	case "-N", "--new-chain":
		t.chain(words[1])
		return "", nil
	case "-F", "--flush":
		if c, ok := t.Chains[words[1]]; ok {
			c.Rules = nil
		}
		return "", nil
	case "-X", "--delete-chain":
		if c, ok := t.Chains[words[1]]; ok && len(c.Rules) == 0 && !builtin(table, c.Name) {
			delete(t.Chains, c.Name)
			t.Order = slices.DeleteFunc(t.Order, func(n string) bool { return n == c.Name })
		}
		return "", nil
	}
	return "", fmt.Errorf("not an iptables-save line: %q", truncate(line))
}

// jumpsFromBuiltin says whether any built-in chain of the nat table has a rule.
func (r *Rules) jumpsFromBuiltin() bool {
	nat, ok := r.Tables["nat"]
	if !ok {
		return false
	}
	for _, name := range builtins["nat"] {
		if c, ok := nat.Chains[name]; ok && len(c.Rules) > 0 {
			return true
		}
	}
	return false
}

// guessTable names the table of lines no `*table` header or `-t` option placed: nat when its chains or
// targets are nat's only (PREROUTING, POSTROUTING, DNAT, SNAT, MASQUERADE, kube-proxy's Service chains),
// filter when they are filter's only (FORWARD, REJECT, kube-proxy's firewall chains); else nat for iptables-save
// lines (`iptables-save | grep` of a Service is its nat rules) and filter for a listing (plain `iptables -L`).
// why says what decided it, for the read-as note.
func guessTable(lines []string, listing bool) (table, why string) {
	var nat, filter string
	for _, l := range lines {
		for _, w := range strings.Fields(l) {
			switch {
			case nat == "" && (w == "PREROUTING" || w == "POSTROUTING" || w == "DNAT" || w == "SNAT" || w == "MASQUERADE" ||
				w == "REDIRECT" || w == "KUBE-MARK-MASQ" || strings.HasPrefix(w, "KUBE-SVC-") || strings.HasPrefix(w, "KUBE-SEP-") ||
				strings.HasPrefix(w, "KUBE-EXT-") || strings.HasPrefix(w, "KUBE-SVL-") || strings.HasPrefix(w, "KUBE-XLB-") ||
				strings.HasPrefix(w, "KUBE-FW-") || w == "KUBE-POSTROUTING"):
				nat = w
			case filter == "" && (w == "FORWARD" || w == "REJECT" || w == "KUBE-FORWARD" || w == "KUBE-FIREWALL" ||
				w == "KUBE-PROXY-FIREWALL" || w == "KUBE-EXTERNAL-SERVICES"):
				filter = w
			}
		}
	}
	switch {
	case nat != "" && filter == "":
		return "nat", "no table named; " + nat + " is nat's"
	case filter != "" && nat == "":
		return "filter", "no table named; " + filter + " is filter's"
	case listing:
		return "filter", "no table named: `iptables -L` lists filter"
	}
	return "nat", "no table named: taken as nat, where kube-proxy's Service rules are"
}

func orNat(t string) string {
	if t == "" {
		return "nat"
	}
	return t
}

func truncate(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

func (r *Rules) table(name string) *Table {
	t, ok := r.Tables[name]
	if !ok {
		t = &Table{Name: name, Chains: map[string]*Chain{}}
		r.Tables[name] = t
	}
	return t
}

func (t *Table) chain(name string) *Chain {
	c, ok := t.Chains[name]
	if !ok {
		c = &Chain{Name: name}
		if builtin(t.Name, name) {
			c.Policy = "ACCEPT"
		}
		t.Chains[name] = c
		t.Order = append(t.Order, name)
	}
	return c
}

// Split splits an iptables-save rule into words the way iptables-restore does: double quotes group, a
// backslash escapes the next character.
func Split(line string) ([]string, error) {
	// Counted first, so that the words take one slice of their own size: a walk splits every rule it evaluates.
	n := 0
	for i := 0; ; n++ {
		_, next, ok, err := scanWord(line, i)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		i = next
	}
	words := make([]string, 0, n)
	for i := 0; ; {
		w, next, ok := nextWord(line, i)
		if !ok {
			return words, nil
		}
		words, i = append(words, w), next
	}
}

// nextWord is scanWord of a line known to split (no quote left open).
func nextWord(line string, i int) (word string, next int, ok bool) {
	word, next, ok, _ = scanWord(line, i)
	return word, next, ok
}

// scanWord reads the word of line that starts at or after i, as Split splits it, and where the scan goes on;
// ok is false when no word is left. A plain word (no escapes; quotes, if any, only around all of it) is a
// slice of the line: a node with 5,000 Services has 100,000 rules to read.
func scanWord(line string, i int) (word string, next int, ok bool, err error) {
	for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
		i++
	}
	if i == len(line) {
		return "", i, false, nil
	}
	start, quotes, escaped, quoted := i, 0, false, false
	for ; i < len(line); i++ {
		ch := line[i]
		if ch == '\\' && i+1 < len(line) {
			escaped = true
			i++
		} else if ch == '"' {
			quoted = !quoted
			quotes++
		} else if (ch == ' ' || ch == '\t') && !quoted {
			break
		}
	}
	if quoted {
		return "", i, false, fmt.Errorf("unterminated quote in %q", truncate(line))
	}
	word = line[start:i]
	switch {
	case !escaped && quotes == 0:
	case !escaped && quotes == 2 && word[0] == '"' && word[len(word)-1] == '"':
		word = word[1 : len(word)-1]
	default:
		word = unescapeWord(word)
	}
	return word, i, true, nil
}

// firstField is strings.Fields(s)[0], "" for a blank s, without making the slice.
func firstField(s string) string {
	s = strings.TrimLeft(s, " \t")
	if i := strings.IndexAny(s, " \t"); i >= 0 {
		return s[:i]
	}
	return s
}

// unescapeWord drops a word's quotes and backslashes, keeping what they protect.
func unescapeWord(word string) string {
	var b strings.Builder
	for i := 0; i < len(word); i++ {
		switch ch := word[i]; {
		case ch == '\\' && i+1 < len(word):
			i++
			b.WriteByte(word[i])
		case ch == '"':
		default:
			b.WriteByte(ch)
		}
	}
	return b.String()
}

// Built-in chains per table and the hooks they sit on.
var builtins = map[string][]string{
	"raw":      {"PREROUTING", "OUTPUT"},
	"mangle":   {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"},
	"nat":      {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
	"filter":   {"INPUT", "FORWARD", "OUTPUT"},
	"security": {"INPUT", "FORWARD", "OUTPUT"},
}

func builtin(table, chain string) bool {
	for _, c := range builtins[table] {
		if c == chain {
			return true
		}
	}
	return false
}

// completeKubeProxy fills in, for a fragment, the chains kube-proxy always has and the fragment left out,
// so that a pasted `iptables-save | grep` still traces; every such rule is marked Assumed.
func (r *Rules) completeKubeProxy() {
	nat, ok := r.Tables["nat"]
	if !ok {
		return
	}
	assume := func(chain string, texts ...string) {
		c := nat.chain(chain)
		if len(c.Rules) > 0 {
			return
		}
		c.Assumed = true
		for _, t := range texts {
			c.Rules = append(c.Rules, &Rule{Text: t, skip: 2, Assumed: true})
		}
	}
	_, hasServices := nat.Chains["KUBE-SERVICES"]
	if hasServices {
		assume("PREROUTING", `-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`)
		assume("OUTPUT", `-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`)
		assume("POSTROUTING", `-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING`)
		assume("KUBE-POSTROUTING",
			`-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN`,
			`-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0`,
			`-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully`)
	}
	if _, ok := nat.Chains["KUBE-NODEPORTS"]; ok && hasServices {
		c := nat.Chains["KUBE-SERVICES"]
		jumps := false
		for _, rule := range c.Rules {
			if rule.target() == "KUBE-NODEPORTS" {
				jumps = true
			}
		}
		if !jumps {
			t := `-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS`
			c.Rules = append(c.Rules, &Rule{Text: t, skip: 2, Assumed: true})
		}
	}
	if r.referenced("KUBE-MARK-MASQ") {
		assume("KUBE-MARK-MASQ", `-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000`)
	}
}

func (r *Rules) referenced(chain string) bool {
	for _, t := range r.Tables {
		for _, c := range t.Chains {
			for _, rule := range c.Rules {
				if rule.target() == chain {
					return true
				}
			}
		}
	}
	return false
}

// target is a rule's -j/-g target.
func target(args []string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "-j" || args[i] == "-g" || args[i] == "--jump" || args[i] == "--goto" {
			return args[i+1]
		}
	}
	return ""
}

// HasKubeProxy says whether the rules are kube-proxy's (a KUBE-SERVICES chain in the nat table).
func (r *Rules) HasKubeProxy() bool {
	t, ok := r.Tables["nat"]
	if !ok {
		return false
	}
	_, ok = t.Chains["KUBE-SERVICES"]
	return ok
}
