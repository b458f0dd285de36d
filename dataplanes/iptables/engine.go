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
// `iptables -L -n [-v]` listings).
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
func (Engine) Sniff(raw []byte) (dataplanes.Sniffed, bool, error) {
	text := string(raw)
	if len(raw) > 0 && raw[0] == '{' {
		return dataplanes.Sniffed{}, false, nil
	}
	r, err := parse(text)
	if err != nil {
		if IsListing(text) {
			return dataplanes.Sniffed{}, true, fmt.Errorf("iptables listing: %v", err)
		}
		return dataplanes.Sniffed{}, true, fmt.Errorf("iptables-save input: %v", err)
	}
	part, err := json.Marshal(Part{"input": text})
	readAs := "iptables-save"
	if IsListing(text) {
		readAs = "iptables -L"
	}
	n := 0
	for _, t := range r.Tables {
		n += len(t.Chains)
	}
	return dataplanes.Sniffed{Part: part, ReadAs: []string{fmt.Sprintf("%s (%d chains)", readAs, n)}}, true, err
}

// parse reads a dump in either form.
func parse(text string) (*Rules, error) {
	var r *Rules
	var err error
	if IsListing(text) {
		r, err = ParseListing(text, "")
	} else {
		r, err = ParseSave(text)
	}
	if err != nil {
		return nil, err
	}
	return r, r.checkLoops()
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
				next, ok := t.Chains[target(rule.Args)]
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
func (Engine) Open(raw json.RawMessage, _ dataplanes.OpenOptions) (*dataplanes.Opened, error) {
	var part Part
	if err := json.Unmarshal(raw, &part); err != nil {
		return nil, fmt.Errorf("iptables part: %v", err)
	}
	o := &dataplanes.Opened{}
	for _, backend := range Backends {
		text, ok := part[backend]
		if !ok {
			continue
		}
		r, err := parse(text)
		if err != nil {
			return nil, fmt.Errorf("iptables (%s): %v", backend, err)
		}
		if backend != "legacy" {
			for t := range r.Tables {
				o.Covers = append(o.Covers, t)
			}
		}
		o.Rulesets = append(o.Rulesets, r)
		o.Serves = o.Serves || r.HasKubeProxy()
	}
	return o, nil
}

var _ netfilter.Ruleset = (*Rules)(nil)
