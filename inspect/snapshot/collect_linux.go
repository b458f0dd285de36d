package snapshot

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/engines"
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
// `docker exec` on kind): every engine's part, and the node's network. What cannot be read is listed in Missing;
// only a node with no engine's part at all fails. Engines, addresses and routes, conntrack and xt_recent are read
// concurrently: on a node with thousands of Services the rule listing is nearly all of the time, and the rest
// hides behind it.
//
// bpffs is the directory of the node's pinned Cilium maps. When it is "", Cilium's own place
// (/sys/fs/bpf/tc/globals) is read if it holds them, as on a real Cilium node.
func Collect(ctx context.Context, bpffs string) (*Snapshot, error) {
	return CollectScoped(ctx, bpffs, nil)
}

// CollectScoped is Collect with each engine's dataplanes.Scope by name: engines with one read the part of their
// state a packet's walk reaches (tracer.CollectFor).
func CollectScoped(ctx context.Context, bpffs string, scopes map[dataplanes.Name]*dataplanes.Scope) (*Snapshot, error) {
	s := &Snapshot{Version: Version, TakenAt: time.Now().UTC(), Engines: map[dataplanes.Name]json.RawMessage{}}
	var mu sync.Mutex
	missing := func(what string, err error) {
		mu.Lock()
		defer mu.Unlock()
		s.Missing = append(s.Missing, fmt.Sprintf("%s: %v", what, err))
	}
	// An engine that lists nf_tables tables leaves out those that engines before it in the list hold (iptables-nft's
	// tables are in iptables' part): its Covered waits for those engines only, so no engine waits on a later one.
	done := make([]chan struct{}, len(engines.All))
	covers := make([][]string, len(engines.All))
	var wg sync.WaitGroup
	for i, e := range engines.All {
		done[i] = make(chan struct{})
		opts := dataplanes.CollectOptions{BPFFS: bpffs, Missing: missing, Scope: scopes[e.Name()], Covered: func() []string {
			var out []string
			for j := range i {
				<-done[j]
				out = append(out, covers[j]...)
			}
			return out
		}}
		wg.Go(func() {
			defer close(done[i])
			part, err := e.Collect(ctx, opts)
			covers[i] = part.Covers
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				s.Missing = append(s.Missing, err.Error())
			} else if len(part.Data) > 0 {
				s.Engines[e.Name()] = part.Data
			}
		})
	}
	var netErr error
	wg.Go(func() { netErr = collectNet(ctx, &s.Net) })
	wg.Go(func() {
		if out, err := dataplanes.Output(ctx, "conntrack", "-L"); err == nil {
			s.Net.Conntrack = nonEmptyLines(out)
		} else {
			missing("conntrack -L", err)
		}
	})
	wg.Go(func() { collectRecent(&s.Net) })
	var ipsets []netstate.IPSet
	wg.Go(func() { ipsets = collectIPSets(ctx, missing) })
	wg.Wait()
	if netErr != nil {
		return nil, netErr
	}
	s.Net.IPSets = ipsets
	sort.Strings(s.Missing)
	if len(s.Engines) == 0 {
		return nil, fmt.Errorf("no iptables or nftables rules, IPVS table or Cilium maps could be read on this node (%s)", strings.Join(s.Missing, "; "))
	}
	return s, nil
}

// Recollect reads again the part of the engine named, with its scope (the chains the last walk reached): the
// rest of the snapshot stands. The engine's Covered is empty: it is called for engines that read a scope, which
// list no nf_tables tables that others hold.
func (s *Snapshot) Recollect(ctx context.Context, bpffs string, name dataplanes.Name, scope *dataplanes.Scope) error {
	e, ok := engines.Get(name)
	if !ok {
		return fmt.Errorf("no engine %s", name)
	}
	part, err := e.Collect(ctx, dataplanes.CollectOptions{BPFFS: bpffs, Scope: scope, Covered: func() []string { return nil },
		Missing: func(what string, err error) { s.Missing = append(s.Missing, fmt.Sprintf("%s: %v", what, err)) }})
	if err != nil {
		return err
	}
	if len(part.Data) > 0 {
		s.Engines[name] = part.Data
	}
	return nil
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
	out, serr := dataplanes.Output(ctx, "ipset", "save")
	if serr == nil {
		sets, serr = netstate.ParseIPSetSave(out)
	}
	if serr != nil {
		missing("ipsets", fmt.Errorf("%v; ipset save: %v", err, serr))
		return nil
	}
	return sets
}

// collectNet reads the addresses, all routing tables and the sysctls a trace uses.
func collectNet(ctx context.Context, n *netstate.State) error {
	out, err := dataplanes.Output(ctx, "ip", "-j", "addr", "show")
	if err != nil {
		return fmt.Errorf("ip addr: %w", err)
	}
	if n.Addresses, err = netstate.ParseAddresses([]byte(out)); err != nil {
		return err
	}
	if out, err = dataplanes.Output(ctx, "ip", "-4", "-j", "route", "show", "table", "all"); err != nil {
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
