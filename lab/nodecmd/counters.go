package nodecmd

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/coreos/go-iptables/iptables"
	"github.com/spf13/cobra"

	"github.com/k8sguide/k8sguide/lab"
)

// counters: the packet counters of chains of one iptables table, read in the node with go-iptables (`iptables
// -t TABLE -L CHAIN -n -v -x`, which the kernel answers from its own counters); stdout is {chain: [packets of
// rule 1, rule 2, …]} as JSON.

// IPTablesCounters reads, where run executes (exe is k8sguide's path there), the packet counters of each of
// chains in table: a chain's counts are in rule order (index 0 is rule 1).
func IPTablesCounters(ctx context.Context, run Exec, exe, table string, chains []string) (map[string][]uint64, error) {
	argv := []string{exe, Group, "counters", "--table", table}
	for _, c := range chains {
		argv = append(argv, "--chain", c)
	}
	var out, errb strings.Builder
	if err := run(ctx, argv, lab.Streams{Out: &out, Err: &errb}); err != nil {
		return nil, failure(errb.String(), err)
	}
	counts := map[string][]uint64{}
	if err := json.Unmarshal([]byte(out.String()), &counts); err != nil {
		return nil, fmt.Errorf("reading the node's counters: %v", err)
	}
	return counts, nil
}

func countersCommand(streams lab.Streams) *cobra.Command {
	var table string
	var chains []string
	cmd := &cobra.Command{
		Use:  "counters",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ipt, err := iptables.New()
			if err != nil {
				return err
			}
			counts := map[string][]uint64{}
			for _, chain := range chains {
				// Stats, not StructuredStats: go-iptables v0.8.0 cannot parse a negated address
				// ("!10.244.0.0/16", kube-proxy's masquerade rule), and the packets are all this needs.
				rows, err := ipt.Stats(table, chain)
				if err != nil {
					return fmt.Errorf("iptables -t %s -L %s: %v", table, chain, err)
				}
				c := make([]uint64, len(rows))
				for i, row := range rows {
					if len(row) == 0 {
						return fmt.Errorf("iptables -t %s -L %s: rule %d has no counters", table, chain, i+1)
					}
					if c[i], err = strconv.ParseUint(row[0], 10, 64); err != nil {
						return fmt.Errorf("iptables -t %s -L %s: rule %d: packets %q: %v", table, chain, i+1, row[0], err)
					}
				}
				counts[chain] = c
			}
			return json.NewEncoder(streams.Out).Encode(counts)
		},
	}
	cmd.Flags().StringVar(&table, "table", "nat", "iptables table")
	cmd.Flags().StringArrayVar(&chains, "chain", nil, "chain to read (repeat)")
	return cmd
}
