package iptables

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
)

// Collect reads the node's iptables rules: the nf_tables backend always (it is what kube-proxy uses on current
// nodes), the legacy one only when legacy tables exist in this namespace (listing them would otherwise load
// legacy modules). Covers names the nf_tables tables the dump holds, and ip6tables-nft's, which nft would
// otherwise list again.
func (Engine) Collect(ctx context.Context, o dataplanes.CollectOptions) (dataplanes.Part, error) {
	part := Part{}
	if out, err := dataplanes.Output(ctx, "iptables-nft-save", "-c"); err == nil {
		if hasRules(out) {
			part["nf_tables"] = out
		}
	} else if out, err2 := dataplanes.Output(ctx, "iptables-save", "-c"); err2 == nil {
		if hasRules(out) {
			part[saveBackend(out)] = out
		}
	} else {
		o.Missing("iptables-save", err)
	}
	if names, err := os.ReadFile("/proc/net/ip_tables_names"); err == nil && len(bytes.TrimSpace(names)) > 0 {
		if out, err := dataplanes.Output(ctx, "iptables-legacy-save", "-c"); err == nil && hasRules(out) {
			part["legacy"] = out
		} else if err != nil {
			o.Missing("iptables-legacy-save", err)
		}
	}
	var p dataplanes.Part
	for t := range savedTables(part["nf_tables"]) {
		p.Covers = append(p.Covers, "ip "+t)
	}
	for _, t := range netfilter.XtablesTables {
		p.Covers = append(p.Covers, "ip6 "+t)
	}
	if len(part) > 0 {
		var err error
		if p.Data, err = json.Marshal(part); err != nil {
			return p, err
		}
	}
	return p, nil
}

// savedTables are the tables an iptables-nft-save dump holds (not those it calls incompatible: nft made them,
// and only nft can show them).
func savedTables(save string) map[string]bool {
	owned := map[string]bool{}
	for _, l := range strings.Split(save, "\n") {
		if name, ok := strings.CutPrefix(l, "*"); ok {
			owned[strings.TrimSpace(name)] = true
		}
	}
	for _, l := range strings.Split(save, "\n") {
		if rest, ok := strings.CutPrefix(l, "# Table `"); ok && strings.Contains(rest, "incompatible") {
			name, _, _ := strings.Cut(rest, "'")
			delete(owned, name)
		}
	}
	return owned
}

func hasRules(save string) bool { return strings.Contains(save, "\n*") || strings.HasPrefix(save, "*") }

func saveBackend(save string) string {
	if strings.Contains(save, "(legacy)") {
		return "legacy"
	}
	return "nf_tables"
}
