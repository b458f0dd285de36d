// Package nftables is the kube-proxy nftables engine: the nft language (model, `nft -j` and text parsers,
// printer), the walk of a packet through a ruleset's base chains, verdict maps and sets, and the collection of a
// node's ruleset.
package nftables

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
)

// Part is the nftables engine's part of a snapshot: `nft list ruleset` as text, without the tables Omitted names
// (another engine's part holds them); or `nft -j list ruleset`, which older snapshots carry (with `nft -a` text
// beside it) and users paste.
type Part struct {
	Text    string          `json:"text,omitempty"`
	Omitted []string        `json:"omitted,omitempty"`
	JSON    json.RawMessage `json:"json,omitempty"`
}

// Engine is the nftables engine's faces.
type Engine struct{}

func (Engine) Name() dataplanes.Name { return dataplanes.NFTables }

// Monitor: nft monitor trace reports the rules of nf_tables tables.
func (Engine) Monitor() string { return "nftables" }

// Sniff recognises `nft list ruleset` text (its first line that is not a comment opens a table) and `nft -j
// list ruleset` output (an object whose "nftables" array holds the ruleset).
func (Engine) Sniff(raw []byte) (dataplanes.Sniffed, bool, error) {
	var part Part
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		var doc struct {
			Nftables json.RawMessage `json:"nftables"`
		}
		if json.Unmarshal(trimmed, &doc) != nil || len(doc.Nftables) == 0 {
			return dataplanes.Sniffed{}, false, nil
		}
		if _, err := ParseRuleset(trimmed, ""); err != nil {
			return dataplanes.Sniffed{}, true, fmt.Errorf("nft -j ruleset: %v", err)
		}
		part.JSON = json.RawMessage(trimmed)
	} else {
		text := string(raw)
		if !looksLikeRuleset(text) {
			return dataplanes.Sniffed{}, false, nil
		}
		if _, err := ParseText(text); err != nil {
			return dataplanes.Sniffed{}, true, fmt.Errorf("nft list ruleset: %v", err)
		}
		part.Text = text
	}
	data, err := json.Marshal(part)
	readAs := "nft list ruleset"
	if len(part.JSON) > 0 {
		readAs = "nft -j list ruleset"
	}
	return dataplanes.Sniffed{Part: data, ReadAs: []string{readAs}}, true, err
}

// looksLikeRuleset says whether text is `nft list` output: its first line that is not a comment opens a table.
func looksLikeRuleset(text string) bool {
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		return strings.HasPrefix(l, "table ")
	}
	return false
}

// Open parses the ruleset and leaves out the tables engines opened before this one walk already, and the
// tracing tables.
func (Engine) Open(raw json.RawMessage, o dataplanes.OpenOptions) (*dataplanes.Opened, error) {
	var part Part
	if err := json.Unmarshal(raw, &part); err != nil {
		return nil, fmt.Errorf("nftables part: %v", err)
	}
	var rs *Ruleset
	var err error
	if len(part.JSON) > 0 {
		rs, err = ParseRuleset(part.JSON, part.Text)
	} else {
		rs, err = ParseText(part.Text)
	}
	if err != nil {
		return nil, fmt.Errorf("nftables: %v", err)
	}
	rs.Leave(o.Covered)
	return &dataplanes.Opened{Rulesets: []netfilter.Ruleset{rs}, Serves: rs.Table("ip", "kube-proxy") != nil}, nil
}
