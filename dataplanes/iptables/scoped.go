package iptables

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
)

// ScopeKey is the key of a Part read chain by chain for one packet (collectScoped): it says which packet, and
// that the node has chains the part does not hold.
const ScopeKey = "scope"

// scopedReaders is how many `iptables-nft -S CHAIN` run at once: a round wants a handful of chains.
const scopedReaders = 4

// collectScoped reads, for a packet's walk (dataplanes.Scope), the built-in chains of iptables-nft's tables, and
// writes the part from them and from what walks read since (readChain): `iptables-nft -t nat -S KUBE-NODEPORTS -v`
// lists one chain and reads no other chain's rules from the kernel, so that on a node with 5,000 Services the
// walk of a NodePort packet reads KUBE-SERVICES, KUBE-NODEPORTS and a dozen small chains, a fifth of the rules,
// where iptables-save lists all 75,000. ok is false where this cannot be done (legacy tables, no iptables-nft,
// no netlink): the caller reads the whole ruleset.
func collectScoped(ctx context.Context, o dataplanes.CollectOptions) (dataplanes.Part, bool) {
	sc := o.Scope
	if sc.Read == nil {
		if names, err := os.ReadFile("/proc/net/ip_tables_names"); err == nil && len(strings.TrimSpace(string(names))) > 0 {
			return dataplanes.Part{}, false // legacy tables: iptables-legacy-save lists them whole
		}
		if _, err := exec.LookPath("iptables-nft"); err != nil {
			return dataplanes.Part{}, false
		}
		var names []string
		for table, chains := range builtins {
			for _, c := range chains {
				names = append(names, table+"/"+c)
			}
		}
		chains, err := netfilter.KernelBaseChainsNamed(names)
		if err != nil {
			return dataplanes.Part{}, false
		}
		if len(chains) == 0 {
			// No iptables-nft table (an nftables-mode node): no part, as Collect makes none from an
			// iptables-nft-save that lists no table. A part of no rules would not open, and the packet's walk
			// would then fall back to reading every engine whole.
			return dataplanes.Part{Covers: ip6Covers()}, true
		}
		tables := map[string]bool{}
		var want []string
		for _, c := range chains {
			tables[c.Table] = true
			want = append(want, c.Table+"/"+c.Name)
		}
		read := map[string]string{HandlesKey: formatHandles(chains, tables)}
		got := make([]string, len(want))
		errs := make([]error, len(want))
		var wg sync.WaitGroup
		slots := make(chan struct{}, scopedReaders)
		for i, k := range want {
			table, chain, _ := strings.Cut(k, "/")
			wg.Go(func() {
				slots <- struct{}{}
				defer func() { <-slots }()
				got[i], errs[i] = listChain(ctx, table, chain)
			})
		}
		wg.Wait()
		for i, k := range want {
			if errs[i] != nil {
				// A table nft made under an iptables name ("incompatible"): iptables-save says what it can.
				return dataplanes.Part{}, false
			}
			read[k] = got[i]
		}
		sc.Read = read
	}
	part := Part{"nf_tables": scopedSave(sc.Read), HandlesKey: sc.Read[HandlesKey], ScopeKey: sc.Packet}
	// Every iptables-nft table is this part's, also those it read no chain of (mangle with kube-proxy's canary
	// chain alone): nft would otherwise list them, and with them every chain and rule of the ruleset.
	p := dataplanes.Part{}
	tables, err := netfilter.KernelTables()
	if err != nil {
		return dataplanes.Part{}, false
	}
	for _, t := range tables {
		if t.Family == "ip" && builtins[t.Name] != nil {
			p.Covers = append(p.Covers, "ip "+t.Name)
		}
	}
	slices.Sort(p.Covers)
	p.Covers = append(p.Covers, ip6Covers()...)
	if p.Data, err = json.Marshal(part); err != nil {
		return dataplanes.Part{}, false
	}
	return p, true
}

// listChain reads one chain of an iptables-nft table, in iptables-save -c's form (chainSave).
func listChain(ctx context.Context, table, chain string) (string, error) {
	if builtins[table] == nil || chain == "" || chain[0] == '-' {
		return "", fmt.Errorf("not an iptables chain: %s/%s", table, chain)
	}
	out, err := dataplanes.Output(ctx, "iptables-nft", "-t", table, "-S", chain, "-v")
	if err != nil {
		return "", err
	}
	return chainSave(out), nil
}

// readChain is a walk's read of a chain its rules jump to and a part read for one packet lacks, inside the node
// (Open with a dataplanes.Scope): the chain's rules join t, and its text sc.Read for the part. nil when it cannot
// be read; the walk then says the chain was not read.
func (r *Rules) readChain(w *netfilter.Walk, sc *dataplanes.Scope, t *Table, name string) *Chain {
	key := t.Name + "/" + name
	if _, tried := sc.Read[key]; tried {
		return t.Chains[name]
	}
	text, err := listChain(cmp.Or(sc.Context, context.Background()), t.Name, name)
	sc.Read[key] = text // tried once, even if it failed
	if err != nil {
		return nil
	}
	for rest := text; rest != ""; {
		var line string
		line, rest, _ = strings.Cut(rest, "\n")
		if line = strings.TrimSpace(line); line != "" {
			if _, err := r.saveLine(t.Name, line); err != nil {
				return nil
			}
		}
	}
	r.ruleCount = 0 // counted again
	c := t.Chains[name]
	if c != nil {
		w.AddRules(len(c.Rules))
	}
	return c
}

// chainSave turns one chain's `iptables -S CHAIN -v` output into iptables-save -c's lines: its declaration, then
// its rules with their counters in front.
func chainSave(listing string) string {
	var b strings.Builder
	for _, line := range strings.Split(listing, "\n") {
		decl, rule := listingToSave(line)
		if decl != "" {
			b.WriteString(decl + "\n")
		}
		if rule != "" {
			b.WriteString(rule + "\n")
		}
	}
	return b.String()
}

// scopedSave writes the chains read (chainSave's lines, by "TABLE/CHAIN") as iptables-save -c would: a table at
// a time, each chain declared before its rules.
func scopedSave(read map[string]string) string {
	var b strings.Builder
	table := ""
	for _, k := range slices.Sorted(maps.Keys(read)) {
		t, _, ok := strings.Cut(k, "/")
		if !ok || read[k] == "" {
			continue
		}
		if t != table {
			if table != "" {
				b.WriteString("COMMIT\n")
			}
			table = t
			fmt.Fprintf(&b, "*%s\n", table)
		}
		b.WriteString(read[k])
	}
	if table != "" {
		b.WriteString("COMMIT\n")
	}
	return b.String()
}

// listingToSave turns one line of `iptables -S CHAIN -v` into iptables-save -c's form: "-P C POLICY -c P B" and
// "-N C" declare the chain (":C POLICY [P:B]", ":C - [0:0]"), and "-A C … -c P B -j T" is the rule with its
// counters in front ("[P:B] -A C … -j T").
func listingToSave(line string) (decl, rule string) {
	line = strings.TrimSpace(line)
	var words []string
	var starts []int
	for i := 0; ; {
		start := i
		for start < len(line) && (line[start] == ' ' || line[start] == '\t') {
			start++
		}
		w, next, ok, err := scanWord(line, start)
		if err != nil || !ok {
			break
		}
		words, starts = append(words, w), append(starts, start)
		i = next
	}
	if len(words) < 2 {
		return "", ""
	}
	counters, cut := "[0:0]", -1
	for i := 2; i+2 < len(words); i++ {
		if words[i] == "-c" && isCount(words[i+1]) && isCount(words[i+2]) {
			counters, cut = "["+words[i+1]+":"+words[i+2]+"]", i
			break
		}
	}
	switch words[0] {
	case "-P":
		if len(words) < 3 {
			return "", ""
		}
		return ":" + words[1] + " " + words[2] + " " + counters, ""
	case "-N":
		return ":" + words[1] + " - [0:0]", ""
	case "-A":
		if cut >= 0 {
			end := len(line)
			if cut+3 < len(words) {
				end = starts[cut+3]
			}
			line = strings.TrimRight(line[:starts[cut]], " \t") + " " + line[end:]
			line = strings.TrimSpace(line)
		}
		return "", counters + " " + line
	}
	return "", ""
}

func isCount(w string) bool {
	if w == "" {
		return false
	}
	for _, c := range w {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
