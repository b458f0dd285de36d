package iptables

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
)

// Collect reads the node's iptables rules: the nf_tables backend always (it is what kube-proxy uses on current
// nodes), the legacy one only when legacy tables exist in this namespace (listing them would otherwise load
// legacy modules). Covers names the nf_tables tables the dump holds, and ip6tables-nft's, which nft would
// otherwise list again.
func (Engine) Collect(ctx context.Context, o dataplanes.CollectOptions) (dataplanes.Part, error) {
	if o.Scope != nil {
		if p, ok := collectScoped(ctx, o); ok {
			return p, nil
		}
	}
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
	saved := savedTables(part["nf_tables"])
	for t := range saved {
		p.Covers = append(p.Covers, "ip "+t)
	}
	if len(saved) > 0 {
		// iptables-save does not show when iptables-nft made its chains, which orders them among other nf_tables
		// chains of equal priority (kube-proxy's nftables table beside kind's iptables nat table): their
		// handles do.
		if chains, err := netfilter.KernelBaseChains(); err == nil {
			part[HandlesKey] = formatHandles(chains, saved)
		} else {
			o.Missing("the nf_tables handles of iptables-nft's chains", err)
		}
	}
	p.Covers = append(p.Covers, ip6Covers()...)
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

// HandlesKey is the key of a Part that holds the nf_tables handles of the iptables-nft tables' base chains, a line
// each: "TABLE CHAIN TABLE-HANDLE CHAIN-HANDLE" ("nat PREROUTING 2 1"), as `nft -a list ruleset` shows them.
const HandlesKey = "nf_tables handles"

// formatHandles writes the handles of the base chains of family ip in the tables iptables-save listed.
func formatHandles(chains []netfilter.KernelChain, saved map[string]bool) string {
	var lines []string
	for _, c := range chains {
		if c.Family == "ip" && saved[c.Table] && c.Created().Known() {
			lines = append(lines, fmt.Sprintf("%s %s %d %d", c.Table, c.Name, c.TableHandle, c.Handle))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// parseHandles reads what formatHandles wrote, by "TABLE/CHAIN"; lines it does not understand are left out.
func parseHandles(text string) map[string]netfilter.Creation {
	out := map[string]netfilter.Creation{}
	for _, l := range strings.Split(text, "\n") {
		f := strings.Fields(l)
		if len(f) != 4 {
			continue
		}
		th, err1 := strconv.Atoi(f[2])
		ch, err2 := strconv.Atoi(f[3])
		if c := (netfilter.Creation{Table: th, Chain: ch}); err1 == nil && err2 == nil && c.Known() {
			out[f[0]+"/"+f[1]] = c
		}
	}
	return out
}

// ip6Covers are ip6tables-nft's tables, which this part stands for although it holds no IPv6 rule: nft would
// otherwise list them again, translating every xt rule.
func ip6Covers() []string {
	var out []string
	for _, t := range netfilter.XtablesTables {
		out = append(out, "ip6 "+t)
	}
	return out
}

func hasRules(save string) bool { return strings.Contains(save, "\n*") || strings.HasPrefix(save, "*") }

func saveBackend(save string) string {
	if strings.Contains(save, "(legacy)") {
		return "legacy"
	}
	return "nf_tables"
}
