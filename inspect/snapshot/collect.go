package snapshot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf"
	"github.com/k8sguide/k8sguide/dataplanes/ipvs"
	"github.com/k8sguide/k8sguide/dataplanes/netstate"
)

// Sysctls a trace reads: forwarding, route_localnet (localhost NodePorts), bridge netfilter, rp_filter.
var Sysctls = []string{
	"net.ipv4.ip_forward",
	"net.ipv4.conf.all.route_localnet",
	"net.ipv4.conf.all.rp_filter",
	"net.bridge.bridge-nf-call-iptables",
	"net.netfilter.nf_conntrack_tcp_be_liberal",
}

// Collect captures the node the calling process runs in (run it inside the node: `ip netns exec NODE`, or
// `docker exec` on kind). What cannot be read is listed in Missing; only a node with no rules at all fails.
// The rules, the addresses and routes, conntrack and xt_recent are read concurrently: on a node with
// thousands of Services the rule listing is nearly all of the time, and the rest hides behind it.
//
// bpffs is the directory of the node's pinned Cilium maps. When it is "", Cilium's own place
// (/sys/fs/bpf/tc/globals) is read if it holds them, as on a real Cilium node.
func Collect(ctx context.Context, bpffs string) (*Snapshot, error) {
	s := &Snapshot{Version: Version, TakenAt: time.Now().UTC()}
	var mu sync.Mutex
	missing := func(what string, err error) {
		mu.Lock()
		defer mu.Unlock()
		s.Missing = append(s.Missing, fmt.Sprintf("%s: %v", what, err))
	}
	var wg sync.WaitGroup
	var netErr error
	wg.Go(func() { collectRules(ctx, s, missing) })
	wg.Go(func() { netErr = collectNet(ctx, &s.Net) })
	wg.Go(func() {
		if out, err := run(ctx, "conntrack", "-L"); err == nil {
			s.Net.Conntrack = nonEmptyLines(out)
		} else {
			missing("conntrack -L", err)
		}
	})
	wg.Go(func() { collectRecent(&s.Net) })
	wg.Go(func() { collectEBPF(s, bpffs, missing) })
	wg.Go(func() { collectIPVS(s, missing) })
	var ipsets []netstate.IPSet
	wg.Go(func() { ipsets = collectIPSets(ctx, missing) })
	wg.Wait()
	if netErr != nil {
		return nil, netErr
	}
	s.Net.IPSets = ipsets
	sort.Strings(s.Missing)
	if s.Iptables == nil && s.NftablesText == "" && s.EBPF == nil && s.IPVS == nil {
		return nil, fmt.Errorf("no iptables or nftables rules, IPVS table or Cilium maps could be read on this node (%s)", strings.Join(s.Missing, "; "))
	}
	return s, nil
}

// collectEBPF reads Cilium's maps: from bpffs when given (a failure is then missing), else from Cilium's own
// place when it has them.
func collectEBPF(s *Snapshot, bpffs string, missing func(string, error)) {
	if bpffs == "" {
		if _, err := os.Stat(filepath.Join(ebpf.DefaultBPFFS, ebpf.MapServices)); err != nil {
			return
		}
		bpffs = ebpf.DefaultBPFFS
	}
	st, err := ebpf.Collect(bpffs)
	if err != nil {
		missing("Cilium maps", err)
		return
	}
	s.EBPF = st
}

// collectIPVS reads the IPVS table, where the kernel has IPVS (its absence is not missing: most nodes have none).
func collectIPVS(s *Snapshot, missing func(string, error)) {
	st, err := ipvs.Collect()
	switch {
	case errors.Is(err, ipvs.ErrNoIPVS):
	case err != nil:
		missing("IPVS table", err)
	default:
		s.IPVS = st
	}
}

// collectIPSets reads the ipsets from the kernel over netlink, which needs no ipset tool (kind's node image has
// none; kube-proxy's pod has its own). Should that fail, `ipset save` is tried where the tool exists; sets that
// cannot be read either way are listed as missing, and the walk then says it assumes each --match-set matches.
func collectIPSets(ctx context.Context, missing func(string, error)) []netstate.IPSet {
	sets, err := netstate.ReadIPSets()
	if err == nil {
		return sets
	}
	if _, lerr := exec.LookPath("ipset"); lerr != nil {
		missing("ipsets", err)
		return nil
	}
	out, serr := run(ctx, "ipset", "save")
	if serr == nil {
		sets, serr = netstate.ParseIPSetSave(out)
	}
	if serr != nil {
		missing("ipsets", fmt.Errorf("%v; ipset save: %v", err, serr))
		return nil
	}
	return sets
}

// collectRules reads iptables, then the nf_tables tables iptables does not cover.
func collectRules(ctx context.Context, s *Snapshot, missing func(string, error)) {
	// iptables: the nf_tables backend always (it is what kube-proxy uses on current nodes), the legacy one
	// only when legacy tables exist in this namespace (listing them would otherwise load legacy modules).
	s.Iptables = map[string]string{}
	if out, err := run(ctx, "iptables-nft-save", "-c"); err == nil {
		if hasRules(out) {
			s.Iptables["nf_tables"] = out
		}
	} else if out, err2 := run(ctx, "iptables-save", "-c"); err2 == nil {
		if hasRules(out) {
			s.Iptables[saveBackend(out)] = out
		}
	} else {
		missing("iptables-save", err)
	}
	if names, err := os.ReadFile("/proc/net/ip_tables_names"); err == nil && len(bytes.TrimSpace(names)) > 0 {
		if out, err := run(ctx, "iptables-legacy-save", "-c"); err == nil && hasRules(out) {
			s.Iptables["legacy"] = out
		} else if err != nil {
			missing("iptables-legacy-save", err)
		}
	}
	if len(s.Iptables) == 0 {
		s.Iptables = nil
	}

	// nftables, as text (`nft -j` takes twice as long as the text on big rulesets). The tables iptables-nft
	// made are left out: iptables-save already has them, and nft would translate every xt rule again.
	tables, err := nfTables()
	if err != nil {
		missing("nf_tables tables", err)
	}
	owned := iptablesTables(s.Iptables["nf_tables"])
	var keep []nfTable
	for _, t := range tables {
		switch {
		case t.Family == "ip" && owned[t.Name]:
			s.NftablesOmitted = append(s.NftablesOmitted, t.Family+" "+t.Name)
		case t.Family == "ip6" && slices.Contains(xtablesTableNames, t.Name):
			s.NftablesOmitted = append(s.NftablesOmitted, t.Family+" "+t.Name)
		default:
			keep = append(keep, t)
		}
	}
	if err != nil || len(s.NftablesOmitted) == 0 {
		if out, err := run(ctx, "nft", "list", "ruleset"); err == nil {
			s.NftablesText = out
		} else {
			missing("nft list ruleset", err)
		}
		return
	}
	var text strings.Builder
	for _, t := range keep {
		if out, err := run(ctx, "nft", "list", "table", t.Family, t.Name); err == nil {
			text.WriteString(out)
		} else {
			missing("nft list table "+t.Family+" "+t.Name, err)
		}
	}
	s.NftablesText = text.String()
}

// xtablesTableNames are the tables iptables-nft and ip6tables-nft make.
var xtablesTableNames = []string{"filter", "nat", "mangle", "raw", "security"}

// iptablesTables are the tables an iptables-nft-save dump holds (not those it calls incompatible: nft
// made them, and only nft can show them).
func iptablesTables(save string) map[string]bool {
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

// collectNet reads the addresses, all routing tables and the sysctls a trace uses.
func collectNet(ctx context.Context, n *netstate.State) error {
	out, err := run(ctx, "ip", "-j", "addr", "show")
	if err != nil {
		return fmt.Errorf("ip addr: %w", err)
	}
	if n.Addresses, err = netstate.ParseAddresses([]byte(out)); err != nil {
		return err
	}
	if out, err = run(ctx, "ip", "-4", "-j", "route", "show", "table", "all"); err != nil {
		return fmt.Errorf("ip route: %w", err)
	}
	if n.Routes, err = netstate.ParseRoutes([]byte(out)); err != nil {
		return err
	}
	n.Sysctls = map[string]string{}
	for _, name := range Sysctls {
		b, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(name, ".", "/"))
		if err == nil {
			n.Sysctls[name] = strings.TrimSpace(string(b))
		}
	}
	return nil
}

func nonEmptyLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

func run(ctx context.Context, name string, args ...string) (string, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg == "" {
			return "", err
		}
		return "", fmt.Errorf("%v: %s", err, msg)
	}
	return out.String(), nil
}

func hasRules(save string) bool { return strings.Contains(save, "\n*") || strings.HasPrefix(save, "*") }

func saveBackend(save string) string {
	if strings.Contains(save, "(legacy)") {
		return "legacy"
	}
	return "nf_tables"
}

// collectRecent reads the xt_recent lists and the kernel clock their last_seen values are on.
func collectRecent(n *netstate.State) {
	files, _ := filepath.Glob("/proc/net/xt_recent/*")
	if len(files) == 0 {
		return
	}
	n.Recent = map[string][]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		n.Recent[filepath.Base(f)] = nonEmptyLines(string(b))
	}
	n.Jiffies, n.HZ = kernelClock()
}

// kernelClock reads jiffies from /proc/timer_list and derives HZ from the uptime: jiffies start at
// 2^32 - 300*HZ at boot (INITIAL_JIFFIES), so HZ = (jiffies - 2^32) / (uptime - 300).
func kernelClock() (uint64, int) {
	b, err := os.ReadFile("/proc/timer_list")
	if err != nil {
		return 0, 0
	}
	var jiffies uint64
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "jiffies:"); ok {
			jiffies, _ = strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			break
		}
	}
	u, err := os.ReadFile("/proc/uptime")
	if err != nil || jiffies == 0 {
		return jiffies, 0
	}
	f := strings.Fields(string(u))
	if len(f) == 0 {
		return jiffies, 0
	}
	up, _ := strconv.ParseFloat(f[0], 64)
	best, bestErr := 0, 1e18
	for _, hz := range []int{100, 250, 300, 1000} {
		want := float64(uint64(1)<<32) - 300*float64(hz) + up*float64(hz)
		if d := math.Abs(want - float64(jiffies)); d < bestErr {
			best, bestErr = hz, d
		}
	}
	return jiffies, best
}
