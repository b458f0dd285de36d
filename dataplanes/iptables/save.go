package iptables

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// Rules is a node's iptables rules: tables by name.
type Rules struct {
	Tables map[string]*Table
	// Partial is true when the input was a fragment (no table header or no built-in chains), as when rules
	// are pasted from `iptables-save | grep …`.
	Partial bool
}

// Table is one iptables table.
type Table struct {
	Name   string
	Chains map[string]*Chain
	Order  []string
}

// Chain is a chain and its rules.
type Chain struct {
	Name   string
	Policy string // ACCEPT/DROP for built-in chains, "" for user chains
	Rules  []*Rule
	// Assumed is set for chains the input did not contain that kube-proxy always creates.
	Assumed bool
}

// Rule is one rule, tokenized.
type Rule struct {
	// Text is the rule as the input showed it, without counters (`-A KUBE-SVC-… -m comment … -j KUBE-SEP-…`).
	Text string
	// Args are the rule's words after `-A CHAIN`, with quotes removed.
	Args           []string
	Packets, Bytes uint64
	Assumed        bool
	// compiled is the rule ready for evaluation, made on its first walk: a walk meets every rule of
	// KUBE-SERVICES, and a node's rules are walked once per Service when a command waits for them.
	compiled *matcher
}

// matcher is the rule compiled, once. Not safe for concurrent walks of one ruleset.
func (r *Rule) matcher() *matcher {
	if r.compiled == nil {
		r.compiled = compile(r.Args)
		if c := r.compiled.comment; c != "" {
			r.compiled.service = trace.ServiceFromComment(c)
		}
	}
	return r.compiled
}

// ParseSave reads iptables-save output (with or without -c counters, one table or all), or a fragment of it.
// Lines before a `*table` line, and fragments with none, belong to the nat table. Comments and COMMIT are skipped.
func ParseSave(text string) (*Rules, error) {
	r := &Rules{Tables: map[string]*Table{}}
	table := ""
	sawHeader := false
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || line == "COMMIT":
			continue
		case strings.HasPrefix(line, "*"):
			table = strings.TrimSpace(line[1:])
			if table == "" {
				return nil, fmt.Errorf("line %d: empty table name", n)
			}
			sawHeader = true
			r.table(table)
		case strings.HasPrefix(line, ":"):
			f := strings.Fields(line[1:])
			if len(f) == 0 {
				return nil, fmt.Errorf("line %d: empty chain declaration", n)
			}
			t := r.table(orNat(table))
			c := t.chain(f[0])
			if len(f) > 1 && f[1] != "-" {
				c.Policy = f[1]
			}
		default:
			var pk, by uint64
			if strings.HasPrefix(line, "[") {
				end := strings.IndexByte(line, ']')
				if end < 0 {
					return nil, fmt.Errorf("line %d: unterminated counters", n)
				}
				a, b, _ := strings.Cut(line[1:end], ":")
				pk, _ = strconv.ParseUint(a, 10, 64)
				by, _ = strconv.ParseUint(b, 10, 64)
				line = strings.TrimSpace(line[end+1:])
			}
			words, err := Split(line)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			if len(words) < 2 || (words[0] != "-A" && words[0] != "--append" && words[0] != "-I") {
				return nil, fmt.Errorf("line %d: not an iptables-save line: %q", n, truncate(line))
			}
			t := r.table(orNat(table))
			c := t.chain(words[1])
			c.Rules = append(c.Rules, &Rule{Text: line, Args: words[2:], Packets: pk, Bytes: by})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(r.Tables) == 0 {
		return nil, fmt.Errorf("no iptables rules in the input")
	}
	r.Partial = !sawHeader
	if r.Partial {
		r.completeKubeProxy()
	}
	return r, nil
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
	words := make([]string, 0, 24)
	i := 0
	for {
		for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
			i++
		}
		if i == len(line) {
			return words, nil
		}
		// Find the word's end, and whether it is plain (no escapes; quotes, if any, only around all of it):
		// then it is a slice of the line. A node with 5,000 Services has 100,000 rules to split.
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
			return nil, fmt.Errorf("unterminated quote in %q", truncate(line))
		}
		word := line[start:i]
		switch {
		case !escaped && quotes == 0:
			words = append(words, word)
		case !escaped && quotes == 2 && word[0] == '"' && word[len(word)-1] == '"':
			words = append(words, word[1:len(word)-1])
		default:
			words = append(words, unescapeWord(word))
		}
	}
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
			w, _ := Split(t)
			c.Rules = append(c.Rules, &Rule{Text: t, Args: w[2:], Assumed: true})
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
			if target(rule.Args) == "KUBE-NODEPORTS" {
				jumps = true
			}
		}
		if !jumps {
			t := `-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS`
			w, _ := Split(t)
			c.Rules = append(c.Rules, &Rule{Text: t, Args: w[2:], Assumed: true})
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
				if target(rule.Args) == chain {
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
