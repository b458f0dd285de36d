// Package nftables is the kube-proxy nftables engine: the nft language (model, `nft -j` and text parsers,
// printer), the walk of a packet through a ruleset's base chains, verdict maps and sets, and the collection of a
// node's ruleset.
package nftables

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
)

// Part is the nftables engine's part of a snapshot: `nft -a list ruleset` as text (older snapshots hold it
// without -a: their tables' and chains' handles, which order base chains of equal priority, are not known),
// without the tables Omitted names (another engine's part holds them); or `nft -j list ruleset`, which older
// snapshots carry (with `nft -a` text beside it) and users paste.
type Part struct {
	Text string `json:"text,omitempty"`
	// Transaction is an `nft -f` script (a pasted kube-proxy transaction), applied after Text.
	Transaction string          `json:"transaction,omitempty"`
	Omitted     []string        `json:"omitted,omitempty"`
	JSON        json.RawMessage `json:"json,omitempty"`
}

// Engine is the nftables engine's faces.
type Engine struct{}

func (Engine) Name() dataplanes.Name { return dataplanes.NFTables }

// Monitor: nft monitor trace reports the rules of nf_tables tables.
func (Engine) Monitor() string { return "nftables" }

// Sniff recognises `nft list ruleset` text (its first line that is not a comment opens a table, or a chain
// or set when the paste starts inside a table), `nft -j list ruleset` output (an object whose "nftables" array
// holds the ruleset) and `nft -f` transactions (kube-proxy's: "add table ip kube-proxy …"). A dump of several
// commands ("$ nft list table ip nat" lines before each output) is read section by section; sections in none
// of these formats (another tool's output) are left to other engines.
func (Engine) Sniff(raw string) (dataplanes.Sniffed, bool, error) {
	var part Part
	var readAs, texts, txs []string
	var last *Ruleset // the ruleset of the last section read
	for _, sec := range sections(raw) {
		body := strings.TrimSpace(sec.body)
		switch {
		case strings.HasPrefix(body, "{"):
			var doc struct {
				Nftables json.RawMessage `json:"nftables"`
			}
			if json.Unmarshal([]byte(body), &doc) != nil || len(doc.Nftables) == 0 {
				continue
			}
			if len(part.JSON) > 0 {
				return dataplanes.Sniffed{}, true, fmt.Errorf("the dump holds nft -j output twice: paste one ruleset")
			}
			if err := checkJSONItems([]byte(body)); err != nil {
				return dataplanes.Sniffed{}, true, fmt.Errorf("nft -j list ruleset: %v", err)
			}
			rs, err := ParseRuleset([]byte(body), "")
			if err != nil {
				return dataplanes.Sniffed{}, true, fmt.Errorf("nft -j list ruleset: %v", err)
			}
			part.JSON = json.RawMessage(body)
			readAs = append(readAs, "nft -j list ruleset "+describe(rs))
			last = rs
		case looksLikeTransaction(sec.body):
			rs, err := ParseTransaction(sec.body)
			if err != nil {
				return dataplanes.Sniffed{}, true, err
			}
			txs = append(txs, sec.body)
			readAs = append(readAs, "nft -f transaction "+describe(rs))
			last = rs
		case looksLikeRuleset(sec.body):
			rs, err := ParseText(sec.body)
			if err != nil {
				return dataplanes.Sniffed{}, true, fmt.Errorf("nft list ruleset: %v", err)
			}
			texts = append(texts, sec.body)
			name := "nft list ruleset"
			if sec.command != "" && strings.Contains(sec.command, "nft") {
				name = sec.command
			}
			readAs = append(readAs, name+" "+describe(rs))
			last = rs
		}
	}
	if len(readAs) == 0 {
		return dataplanes.Sniffed{}, false, nil
	}
	if len(part.JSON) > 0 && len(texts)+len(txs) > 0 {
		return dataplanes.Sniffed{}, true, fmt.Errorf("the dump holds both nft -j output and nft text: paste one of them")
	}
	part.Text = strings.Join(texts, "\n")
	part.Transaction = strings.Join(txs, "\n")
	// The whole must read too: a transaction may change the listing's tables, and chains may loop across
	// sections. A dump of one section is its whole: what part.ruleset() would parse again is what was read.
	rs := last
	var err error
	if len(readAs) == 1 {
		err = rs.checkLoops()
	} else {
		rs, err = part.ruleset()
	}
	if err != nil {
		return dataplanes.Sniffed{}, true, err
	}
	if len(rs.Tables) == 0 {
		return dataplanes.Sniffed{}, true, fmt.Errorf("%s: no tables: there is no rule to walk", strings.Join(readAs, ", "))
	}
	data, err := part.marshal()
	if err != nil {
		return dataplanes.Sniffed{}, true, err
	}
	return dataplanes.Sniffed{Part: data, ReadAs: readAs, Parsed: rs}, true, nil
}

// marshal is json.Marshal(part), with the text fields written by dataplanes.JSONString (in one buffer of their
// size: encoding/json's growing buffer allocated five times a 5,000-Service listing's 2.5 MB). nft -j output
// in the part is left to encoding/json, which compacts it.
func (part *Part) marshal() ([]byte, error) {
	if len(part.JSON) > 0 {
		return json.Marshal(part)
	}
	out := make([]byte, 0, len(part.Text)+len(part.Transaction)+64)
	out = append(out, '{')
	field := func(name string) {
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(append(append(out, '"'), name...), '"', ':')
	}
	for _, f := range []struct{ name, value string }{{"text", part.Text}, {"transaction", part.Transaction}} {
		if f.value == "" {
			continue // omitempty
		}
		field(f.name)
		var err error
		if out, err = dataplanes.AppendJSONString(out, f.value, 64); err != nil {
			return nil, err
		}
	}
	if len(part.Omitted) > 0 {
		v, err := json.Marshal(part.Omitted)
		if err != nil {
			return nil, err
		}
		field("omitted")
		out = append(out, v...)
	}
	return append(out, '}'), nil
}

// section is one command's output in a dump: command is what its "$ COMMAND" line named ("" before any).
type section struct {
	command, body string
}

// sections splits a dump at its "$ COMMAND" lines. Each body is a slice of raw (its lines are contiguous
// there), not a copy: every engine is shown every dump, and the parsed ruleset keeps its words as slices of it.
func sections(raw string) []section {
	var out []section
	cur := section{}
	start := 0 // where cur's body starts in raw
	for at := 0; at < len(raw); {
		line, next := raw[at:], len(raw)
		if i := strings.IndexByte(line, '\n'); i >= 0 {
			line, next = line[:i], at+i+1
		}
		if cmd, ok := strings.CutPrefix(line, "$ "); ok {
			cur.body = raw[start:at]
			out = append(out, cur)
			cur, start = section{command: strings.TrimSpace(cmd)}, next
		}
		at = next
	}
	cur.body = raw[start:]
	return append(out, cur)
}

// describe says what a reader found, for Sniffed.ReadAs: "(1 table, 40 chains, 3 maps)", and what is cut.
func describe(rs *Ruleset) string {
	var tables, chains, sets, maps int
	var cut []string
	for _, t := range rs.Tables {
		tables++
		name := t.Family + " " + t.Name
		if t.Cut != "" {
			cut = append(cut, "table "+name)
		}
		for _, c := range t.Chains {
			chains++
			if c.Cut != "" {
				cut = append(cut, "chain "+name+" "+c.Name)
			}
		}
		for _, s := range t.Sets {
			if s.Map {
				maps++
			} else {
				sets++
			}
			if s.Cut != "" {
				cut = append(cut, s.Kind()+" "+name+" "+s.Name)
			}
		}
	}
	plural := func(n int, what string) string {
		if n == 1 {
			return "1 " + what
		}
		return fmt.Sprintf("%d %ss", n, what)
	}
	parts := []string{plural(tables, "table"), plural(chains, "chain")}
	if maps > 0 {
		parts = append(parts, plural(maps, "map"))
	}
	if sets > 0 {
		parts = append(parts, plural(sets, "set"))
	}
	out := "(" + strings.Join(parts, ", ")
	if len(cut) > 0 {
		if len(cut) > 3 {
			cut = append(cut[:3], fmt.Sprintf("%d more", len(cut)-3))
		}
		out += "; not all shown: " + strings.Join(cut, ", ")
	}
	return out + ")"
}

// jsonKinds are the objects `nft -j list ruleset` prints.
var jsonKinds = map[string]bool{"metainfo": true, "table": true, "chain": true, "rule": true, "set": true,
	"map": true, "element": true, "flowtable": true, "counter": true, "quota": true, "ct helper": true,
	"ct timeout": true, "ct expectation": true, "limit": true, "secmark": true, "synproxy": true, "tunnel": true}

// checkJSONItems refuses an "nftables" array that is not a ruleset nft printed: an item that is not an object,
// or an object nft does not print, or no table at all (an empty ruleset, which gives no rule to walk).
func checkJSONItems(data []byte) error {
	var doc struct {
		Nftables []json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("the \"nftables\" array: %v", err)
	}
	tables := 0
	for i, it := range doc.Nftables {
		var obj map[string]json.RawMessage
		if json.Unmarshal(it, &obj) != nil || obj == nil {
			return fmt.Errorf("item %d of the \"nftables\" array, %s, is not an object", i+1, shortJSON(it))
		}
		for k := range obj {
			if !jsonKinds[k] {
				return fmt.Errorf("item %d of the \"nftables\" array, %s, is not an object nft prints", i+1, shortJSON(it))
			}
			if k == "table" {
				tables++
			}
		}
	}
	if tables == 0 {
		return fmt.Errorf("the nft -j output holds no tables (an empty ruleset): there is no rule to walk")
	}
	return nil
}

func shortJSON(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

// looksLikeRuleset says whether text is `nft list` output: its first line that is not a comment opens a
// table, or a chain, set or map (a paste that starts inside a table).
func looksLikeRuleset(text string) bool {
	l := firstLine(text)
	if strings.HasPrefix(l, "table ") {
		return true
	}
	for _, w := range []string{"chain ", "set ", "map "} {
		if strings.HasPrefix(l, w) && strings.HasSuffix(l, "{") && len(strings.Fields(l)) == 3 {
			return true
		}
	}
	return false
}

// ruleset parses the part: the JSON, or the listing and the transaction applied after it.
func (part *Part) ruleset() (*Ruleset, error) {
	var rs *Ruleset
	var err error
	switch {
	case len(part.JSON) > 0:
		rs, err = ParseRuleset(part.JSON, part.Text)
	case part.Transaction != "":
		// nft -f reads a listing's blocks too: the listing, then the commands that change it.
		src := part.Transaction
		if part.Text != "" {
			src = part.Text + "\n" + part.Transaction
		}
		rs, err = ParseTransaction(src)
	default:
		rs, err = ParseText(part.Text)
	}
	if err != nil {
		return nil, err
	}
	if err := rs.checkLoops(); err != nil {
		return nil, err
	}
	return rs, nil
}

// Open parses the ruleset and leaves out the tables engines opened before this one walk already, and the
// tracing tables.
func (Engine) Open(raw json.RawMessage, o dataplanes.OpenOptions) (*dataplanes.Opened, error) {
	rs, _ := o.Sniffed.(*Ruleset) // a pasted dump's, which Sniff has read
	if rs == nil {
		var part Part
		if err := json.Unmarshal(raw, &part); err != nil {
			return nil, fmt.Errorf("nftables part: %v", err)
		}
		var err error
		if rs, err = part.ruleset(); err != nil {
			return nil, fmt.Errorf("nftables: %v", err)
		}
	}
	rs.Leave(o.Covered)
	opened := &dataplanes.Opened{Rulesets: []netfilter.Ruleset{rs}, Serves: rs.Table("ip", "kube-proxy") != nil}
	if o.Node == "" {
		// A pasted dump may be a part of a ruleset (a snapshot is all of the node's): say what it lacks.
		rs.pasted = true
		if len(rs.realBaseChains()) == 0 {
			opened.Missing = append(opened.Missing, "a base chain: the input has no chain with a hook (`type nat hook prerouting`), so nothing sends packets into these chains")
		}
	}
	return opened, nil
}
