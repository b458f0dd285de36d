// Package iptables is the kube-proxy iptables engine: iptables-save dumps and `iptables -L` listings read into
// tables of rules, the rule-by-rule walk of a packet through them, and the collection of a node's rules.
package iptables

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
)

// Part is the iptables engine's part of a snapshot: `iptables-save -c` per backend that has rules ("nf_tables",
// "legacy"), or "input", a dump pasted into `trace --snapshot` (an iptables-save dump, whole or a fragment, or
// `iptables -L -n [-v]` listings); and, beside "nf_tables", the nf_tables handles of its base chains (HandlesKey;
// snapshots taken before k8sguide read them lack it).
type Part map[string]string

// Backends are the keys of a Part, in the order they are walked.
var Backends = []string{"nf_tables", "legacy", "input"}

// Engine is the iptables engine's faces.
type Engine struct{}

func (Engine) Name() dataplanes.Name { return dataplanes.IPTables }

// Monitor: xtables-monitor --trace reports the rules of iptables-nft.
func (Engine) Monitor() string { return "iptables" }

// Sniff reads any text: iptables-save fragments (grep'd lines, no header) are the commonest paste, so this
// engine is asked last (see engines.Lenient) and its parser says which line is wrong.
func (Engine) Sniff(text string) (dataplanes.Sniffed, bool, error) {
	if len(text) > 0 && text[0] == '{' {
		return dataplanes.Sniffed{}, false, nil
	}
	r, readAs, err := parseAll(text)
	if err != nil {
		if IsListing(text) {
			return dataplanes.Sniffed{}, true, fmt.Errorf("iptables listing: %v", err)
		}
		return dataplanes.Sniffed{}, true, fmt.Errorf("iptables-save input: %v", err)
	}
	// Part{"input": text} as json.Marshal writes it, in one buffer of its size.
	part, err := dataplanes.AppendJSONString([]byte(`{"input":`), text, 1)
	if err != nil {
		return dataplanes.Sniffed{}, true, err
	}
	part = append(part, '}')
	return dataplanes.Sniffed{Part: part, ReadAs: readAs, Parsed: r}, true, nil
}

// parse reads a dump: one or more outputs of iptables-save, `iptables -S` or `iptables -L`, each after the
// `$ COMMAND` line that printed it when the paste showed it.
func parse(text string) (*Rules, error) {
	r, _, err := parseAll(text)
	return r, err
}

// segment is one command's output in a dump.
type segment struct {
	command string // "" when the dump does not show it
	// text is the output's lines joined, its command line first when it has one: a slice of the dump, unless
	// an empty prompt in the middle was left out.
	text string
	// ended: the paste showed where the output ends (the next prompt, "$ ", followed it).
	ended bool
}

// body is the output without its command line.
func (s segment) body() string {
	if s.command == "" {
		return s.text
	}
	_, rest, _ := strings.Cut(s.text, "\n")
	return rest
}

// segments splits a dump at the `$ COMMAND` lines of iptables commands (a `$` line of a listing that names
// no iptables tool stays in it: the guide's walkthroughs show `$ ipt KUBE-SERVICES`-like hints). The lines are
// those of strings.Split(text, "\n"); a segment's text is the slice of text they span, not a copy of them.
func segments(text string) []segment {
	var out []segment
	cur := segment{}
	var pieces []string  // cur's runs of lines cut by an empty prompt, each a slice of text
	run, runEnd := -1, 0 // where cur's current run of lines starts and ends in text (-1: none)
	lines := 0           // cur's lines
	endRun := func() {
		if run >= 0 {
			pieces = append(pieces, text[run:runEnd])
			run = -1
		}
	}
	finish := func() {
		endRun()
		if len(pieces) == 1 {
			cur.text = pieces[0]
		} else {
			cur.text = strings.Join(pieces, "\n")
		}
		pieces = nil
	}
	for at := 0; ; {
		end, next := len(text), -1
		if i := strings.IndexByte(text[at:], '\n'); i >= 0 {
			end, next = at+i, at+i+1
		}
		l := text[at:end]
		switch cmd, isCmd := strings.CutPrefix(strings.TrimSpace(l), "$ "); {
		case strings.TrimSpace(l) == "$":
			cur.ended = true // an empty prompt: the output before it is whole
			endRun()
		case isCmd && iptablesCommand(cmd):
			if lines > 0 || cur.command != "" {
				finish()
				out = append(out, cur)
			}
			cur, lines, pieces = segment{command: cmd}, 1, nil
			run, runEnd = at, end
		default:
			if run < 0 {
				run = at
			}
			runEnd = end
			lines++
		}
		if next < 0 {
			break
		}
		at = next
	}
	finish()
	return append(out, cur)
}

// iptablesCommand says whether a command line runs iptables (any variant, or the guide's `ipt` alias).
func iptablesCommand(cmd string) bool {
	for _, w := range strings.Fields(cmd) {
		if w == "|" {
			return false
		}
		base := w[strings.LastIndexByte(w, '/')+1:]
		if strings.HasPrefix(base, "iptables") || strings.HasPrefix(base, "ip6tables") || base == "ipt" {
			return true
		}
	}
	return false
}

// commandForm reads what an iptables command prints: its table (-t; "" when not given), whether it lists
// (-L, -nvL, --list) or prints rules (-S, iptables-save), and the command from the tool on, without a pipe.
func commandForm(cmd string) (table string, listing, rules, verbose bool, shown string) {
	words := strings.Fields(cmd)
	start := -1
	for i, w := range words {
		if w == "|" {
			words = words[:i]
			break
		}
		base := w[strings.LastIndexByte(w, '/')+1:]
		if start < 0 && (strings.HasPrefix(base, "iptables") || strings.HasPrefix(base, "ip6tables") || base == "ipt") {
			start = i
			rules = strings.HasSuffix(base, "-save")
			if base == "ipt" {
				// The guide's alias: `alias ipt="iptables -t nat -nvL"`.
				table, listing, verbose = "nat", true, true
			}
		}
	}
	if start < 0 {
		return "", false, false, false, cmd
	}
	words = words[start:]
	for i, w := range words {
		switch {
		case (w == "-t" || w == "--table") && i+1 < len(words):
			table = words[i+1]
		case strings.HasPrefix(w, "--table="):
			table = strings.TrimPrefix(w, "--table=")
		case strings.HasPrefix(w, "-t") && len(w) > 2 && !strings.HasPrefix(w, "--"):
			table = w[2:]
		case w == "--list":
			listing = true
		case w == "--verbose":
			verbose = true
		case w == "--list-rules":
			rules = true
		case strings.HasPrefix(w, "-") && !strings.HasPrefix(w, "--") && len(w) > 1:
			if strings.ContainsRune(w[1:], 'L') {
				listing = true
			}
			if strings.ContainsRune(w[1:], 'S') {
				rules = true
			}
			if strings.ContainsRune(w[1:], 'v') {
				verbose = true
			}
		}
	}
	return table, listing, rules, verbose, strings.Join(words, " ")
}

// parseAll reads every segment of a dump into one set of tables, and says how each was read.
func parseAll(text string) (*Rules, []string, error) {
	all := &Rules{Tables: map[string]*Table{}}
	var readAs []string
	segs := segments(text)
	for i, seg := range segs {
		body := seg.text
		table, listing, rules, verbose, shown := commandForm(seg.command)
		if seg.command == "" {
			listing = IsListing(body)
		} else if !listing && !rules {
			listing = IsListing(body)
		}
		var r *Rules
		var err error
		how := shown
		if listing {
			if table == "" && seg.command != "" {
				table = "filter" // `iptables -L` with no -t lists filter
			}
			why := ""
			if table == "" {
				table, why = guessTable(strings.Split(body, "\n"), true)
			}
			r, err = parseListing(body, table, verbose)
			if how == "" {
				how = "iptables -L"
			}
			if why != "" {
				how += " (table " + table + ": " + why + ")"
			}
		} else {
			if table == "" && seg.command != "" && !strings.Contains(shown, "-save") {
				table = "filter" // `iptables -S` with no -t prints filter
			}
			// An output another follows is whole as pasted: only the last may have been cut.
			r, err = parseSave(seg.body(), table, seg.ended || i < len(segs)-1)
			if how == "" {
				how = "iptables-save"
			}
			if err == nil && r.TableGuess != "" {
				how += " (" + r.TableGuess + ")"
			}
		}
		if err != nil {
			if seg.command != "" {
				return nil, nil, fmt.Errorf("the output of `%s`: %v", shown, err)
			}
			return nil, nil, err
		}
		chains := 0
		for _, t := range r.Tables {
			chains += len(t.Chains)
		}
		extra := []string{fmt.Sprintf("%d chains", chains)}
		if chains == 1 {
			extra[0] = "1 chain"
		}
		if r.Cut != "" {
			extra = append(extra, "ends inside table "+r.Cut+" with no COMMIT: cut?")
		}
		if r.Partial {
			extra = append(extra, "a part of the rules")
		}
		readAs = append(readAs, fmt.Sprintf("%s [%s]", how, strings.Join(extra, "; ")))
		all.merge(r)
	}
	if len(all.Tables) == 0 {
		return nil, nil, fmt.Errorf("no iptables rules in the input")
	}
	return all, readAs, all.checkLoops()
}

// merge adds r's tables to all: a chain in both keeps the later listing of it when that has rules (a
// walkthrough lists a chain again after a change).
func (all *Rules) merge(r *Rules) {
	if len(all.Tables) == 0 {
		*all = *r
		return
	}
	for name, t := range r.Tables {
		dst := all.table(name)
		for _, cname := range t.Order {
			c := t.Chains[cname]
			if old, ok := dst.Chains[cname]; ok && c.Assumed && !old.Assumed {
				continue // a segment's stand-in for a chain another segment shows
			}
			if old, ok := dst.Chains[cname]; ok && len(c.Rules) == 0 && !c.Assumed {
				if c.Policy != "" && !builtin(name, cname) {
					old.Policy = c.Policy
				}
				continue
			}
			if _, ok := dst.Chains[cname]; !ok {
				dst.Order = append(dst.Order, cname)
			}
			dst.Chains[cname] = c
		}
	}
	all.Partial = all.Partial || r.Partial
	if r.Cut != "" {
		all.Cut = r.Cut
	}
}

// ipvsMode names the ipset by which rules show kube-proxy's IPVS mode (KUBE-CLUSTER-IP and the other sets it
// makes for its virtual servers), "" when they do not.
func (r *Rules) ipvsMode() string {
	for _, tname := range sortedKeys(r.Tables) {
		t := r.Tables[tname]
		for _, cname := range t.Order {
			for _, rule := range t.Chains[cname].Rules {
				if !strings.Contains(rule.Text, "--match-set") && rule.args == nil {
					continue // a save line without the option: not split
				}
				args := rule.Args()
				for i, a := range args {
					if a == "--match-set" && i+1 < len(args) {
						switch set := args[i+1]; set {
						case "KUBE-CLUSTER-IP", "KUBE-LOAD-BALANCER", "KUBE-NODE-PORT-TCP", "KUBE-NODE-PORT-UDP", "KUBE-EXTERNAL-IP":
							return set
						}
					}
				}
			}
		}
	}
	return ""
}

// checkLoops refuses rules whose chains jump or go to each other in a circle. The kernel refuses to load them
// (ELOOP from both iptables-legacy and nf_tables), so no node's dump has one; a walk through it would never end.
func (r *Rules) checkLoops() error {
	for _, tname := range sortedKeys(r.Tables) {
		t := r.Tables[tname]
		const (
			unseen = iota
			open
			done
		)
		state := map[string]int{}
		var path []string
		var visit func(c *Chain) error
		visit = func(c *Chain) error {
			state[c.Name] = open
			path = append(path, c.Name)
			for _, rule := range c.Rules {
				next, ok := t.Chains[rule.target()]
				if !ok {
					continue
				}
				switch state[next.Name] {
				case open:
					i := slices.Index(path, next.Name)
					loop := append(slices.Clone(path[i:]), next.Name)
					return fmt.Errorf("the rules loop: %s/%s (the kernel refuses to load chains that jump in a circle, so this is no node's dump)", t.Name, strings.Join(loop, " -> "))
				case unseen:
					if err := visit(next); err != nil {
						return err
					}
				}
			}
			path = path[:len(path)-1]
			state[c.Name] = done
			return nil
		}
		for _, name := range t.Order {
			if state[name] == unseen {
				if err := visit(t.Chains[name]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Open parses each backend's rules. iptables-nft's tables are nf_tables tables too: they are named in Covers
// (legacy tables are not), so that the nftables engine leaves them to this one.
func (Engine) Open(raw json.RawMessage, opts dataplanes.OpenOptions) (*dataplanes.Opened, error) {
	// A pasted dump's part, which Sniff has read (a 5,000-Service dump is parsed once, not twice): its rules are
	// ready, and its text need not be decoded.
	sniffedRules, _ := opts.Sniffed.(*Rules)
	part := Part{"input": ""}
	if sniffedRules == nil {
		part = nil
		if err := json.Unmarshal(raw, &part); err != nil {
			return nil, fmt.Errorf("iptables part: %v", err)
		}
	}
	o := &dataplanes.Opened{}
	ipvsMissing := 0 // how many of o.Missing are the IPVS table
	for _, backend := range Backends {
		text, ok := part[backend]
		if !ok {
			continue
		}
		r := sniffedRules
		if backend != "input" || r == nil {
			var err error
			if r, err = parse(text); err != nil {
				return nil, fmt.Errorf("iptables (%s): %v", backend, err)
			}
		}
		if backend != "legacy" {
			for t := range r.Tables {
				o.Covers = append(o.Covers, t)
			}
		}
		switch backend {
		case "nf_tables":
			if r.Scope = part[ScopeKey]; r.Scope != "" {
				r.unreadChains = &chainSet{m: map[string]bool{}}
				if opts.Scope != nil && opts.Scope.Read != nil {
					r.scope = opts.Scope
				}
			}
			if h, ok := part[HandlesKey]; ok {
				r.Created = parseHandles(h)
				r.OrderUnknown = "its nf_tables handles were not read with the rules (the chain was made in between?)"
			} else {
				r.OrderUnknown = "iptables-save does not show when iptables-nft made it, and the snapshot holds no nf_tables handles (an older k8sguide took it)"
			}
		case "legacy":
			r.OrderUnknown = "an iptables-legacy chain: the kernel registers its table when it is first used, which no listing shows"
		default:
			r.OrderUnknown = "an iptables dump does not show when a chain was made (`nft -a list ruleset` shows iptables-nft's handles)"
		}
		o.Rulesets = append(o.Rulesets, r)
		o.Serves = o.Serves || r.HasKubeProxy()
		if set := r.ipvsMode(); set != "" && !slices.Contains(opts.Parts, dataplanes.IPVS) {
			// kube-proxy's IPVS mode keeps only marks and accepts in iptables; IPVS, at INPUT, picks the
			// backend. Without its table a Service's packet looks "answered by the node's own socket".
			o.Missing = append(o.Missing, "the IPVS table (`ipvsadm -Ln`): this node runs kube-proxy in IPVS mode (its rules match ipset "+set+"), and IPVS, not iptables, picks the backend")
			ipvsMissing++
		}
		if _, ok := r.Tables["nat"]; !ok && r.Partial && r.Tables["filter"] != nil {
			// `iptables -nvL`, the commonest paste, lists the filter table only.
			o.Missing = append(o.Missing, "the nat table, where kube-proxy translates Services: the input lists only the filter table")
		} else if r.Partial {
			// A part of the rules (grep'd, or kube-proxy's restore input alone): that none of them translated a
			// packet says nothing about the rest.
			o.Missing = append(o.Missing, "the rest of the node's iptables rules: the input is a part of them (no built-in chains), and no rule in it translated this packet")
		} else if _, ok := r.Tables["nat"]; !ok {
			o.Missing = append(o.Missing, "the nat table, where kube-proxy translates Services: the input has only "+strings.Join(sortedKeys(r.Tables), ", "))
		}
	}
	o.MissingAfterFilter = ipvsMissing > 0 && len(o.Missing) == ipvsMissing
	return o, nil
}

var _ netfilter.Ruleset = (*Rules)(nil)
