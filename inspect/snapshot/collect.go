package snapshot

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/k8sguide/k8sguide/inspect/netstate"
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
func Collect(ctx context.Context) (*Snapshot, error) {
	s := &Snapshot{Version: Version, TakenAt: time.Now().UTC(), Iptables: map[string]string{}}
	missing := func(what string, err error) {
		s.Missing = append(s.Missing, fmt.Sprintf("%s: %v", what, err))
	}

	// iptables: the nf_tables backend always (it is what kube-proxy uses on current nodes), the legacy one
	// only when legacy tables exist in this namespace (listing them would otherwise load legacy modules).
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

	if out, err := run(ctx, "nft", "-j", "list", "ruleset"); err == nil {
		s.Nftables = []byte(strings.TrimSpace(out))
		if text, err := run(ctx, "nft", "-a", "list", "ruleset"); err == nil {
			s.NftablesText = text
		}
	} else {
		missing("nft", err)
	}

	out, err := run(ctx, "ip", "-j", "addr", "show")
	if err != nil {
		return nil, fmt.Errorf("ip addr: %w", err)
	}
	if s.Net.Addresses, err = netstate.ParseAddresses([]byte(out)); err != nil {
		return nil, err
	}
	if out, err = run(ctx, "ip", "-4", "-j", "route", "show", "table", "all"); err != nil {
		return nil, fmt.Errorf("ip route: %w", err)
	}
	if s.Net.Routes, err = netstate.ParseRoutes([]byte(out)); err != nil {
		return nil, err
	}

	s.Net.Sysctls = map[string]string{}
	for _, name := range Sysctls {
		b, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(name, ".", "/"))
		if err == nil {
			s.Net.Sysctls[name] = strings.TrimSpace(string(b))
		}
	}

	if out, err := run(ctx, "conntrack", "-L"); err == nil {
		for _, l := range strings.Split(out, "\n") {
			if strings.TrimSpace(l) != "" {
				s.Net.Conntrack = append(s.Net.Conntrack, l)
			}
		}
	} else {
		missing("conntrack -L", err)
	}

	collectRecent(&s.Net)
	if s.Iptables == nil && len(s.Nftables) == 0 {
		return nil, fmt.Errorf("no iptables or nftables rules could be read on this node (%s)", strings.Join(s.Missing, "; "))
	}
	return s, nil
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
		var lines []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.TrimSpace(l) != "" {
				lines = append(lines, l)
			}
		}
		n.Recent[filepath.Base(f)] = lines
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
