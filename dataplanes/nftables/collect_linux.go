package nftables

import (
	"context"
	"encoding/json"
	"slices"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
)

// Collect reads the node's nf_tables ruleset as text (`nft -j` takes twice as long as the text on big rulesets),
// with handles (`nft -a`): a table's and a chain's handle say which of two base chains of equal priority the
// kernel runs first (netfilter.Creation).
// The tables other engines hold (iptables-nft's: iptables-save has them, and nft would translate every xt rule
// again) are left out and named in Omitted, which the part keeps even when nothing else is left: the reader sees
// those tables were not forgotten.
func (Engine) Collect(ctx context.Context, o dataplanes.CollectOptions) (dataplanes.Part, error) {
	var part Part
	tables, err := nfTables()
	if err != nil {
		o.Missing("nf_tables tables", err)
	}
	covered := o.Covered()
	var keep []netfilter.KernelTable
	for _, t := range tables {
		if slices.Contains(covered, t.Family+" "+t.Name) {
			part.Omitted = append(part.Omitted, t.Family+" "+t.Name)
		} else {
			keep = append(keep, t)
		}
	}
	if err != nil || len(part.Omitted) == 0 {
		if out, err := dataplanes.Output(ctx, "nft", "-a", "list", "ruleset"); err == nil {
			part.Text = out
		} else {
			o.Missing("nft -a list ruleset", err)
		}
	} else {
		var text strings.Builder
		for _, t := range keep {
			if out, err := dataplanes.Output(ctx, "nft", "-a", "list", "table", t.Family, t.Name); err == nil {
				text.WriteString(out)
			} else {
				o.Missing("nft -a list table "+t.Family+" "+t.Name, err)
			}
		}
		part.Text = text.String()
	}
	if part.Text == "" && len(part.Omitted) == 0 {
		return dataplanes.Part{}, nil
	}
	data, err := json.Marshal(part)
	return dataplanes.Part{Data: data}, err
}
