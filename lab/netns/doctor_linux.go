package netns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/ebpf/datapath"
	"github.com/k8sguide/k8sguide/dataplanes/engines"
	"github.com/k8sguide/k8sguide/dataplanes/ipvs"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/doctor"
)

// Doctor checks what a netns lab of each dataplane in ds needs of this host. The quick checks read files, PATH
// and limits; with probe, the kernel is also tried in a namespace of its own (a veth pair, a bridge and the
// dataplane's rules), which is removed again.
func (p *Provider) Doctor(ctx context.Context, ds []dataplanes.Name, probe bool) []doctor.Check {
	checks := p.hostChecks()
	for _, d := range ds {
		checks = append(checks, p.dataplaneChecks(d)...)
	}
	if probe && os.Geteuid() == 0 {
		checks = append(checks, p.probe(ctx, ds)...)
	}
	return doctor.Grouped(checks)
}

// CheckHost says, in one line, what this machine lacks to run a netns lab with dataplane d: the first failed
// quick check. What the kernel lacks comes first (root would not help), then what every lab needs.
func (p *Provider) CheckHost(d dataplanes.Name) error {
	if _, ok := engines.Get(d); !ok {
		return fmt.Errorf("unknown dataplane %q", d)
	}
	var kernel, rest []doctor.Check
	for _, c := range p.dataplaneChecks(d) {
		if c.Name == ipvsCheckName {
			kernel = append(kernel, c)
		} else {
			rest = append(rest, c)
		}
	}
	if err := (doctor.Report{Checks: kernel}).Err(); err != nil {
		return fmt.Errorf("dataplane %s: %w", d, err)
	}
	if err := (doctor.Report{Checks: p.hostChecks()}).Err(); err != nil {
		return err
	}
	if err := (doctor.Report{Checks: rest}).Err(); err != nil {
		return fmt.Errorf("dataplane %s: %w", d, err)
	}
	return nil
}

// hostChecks are what every netns lab needs.
func (p *Provider) hostChecks() []doctor.Check {
	const f = ProviderName
	checks := []doctor.Check{
		doctor.FromError(f, "root", "running as root", checkRoot()),
	}
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		checks = append(checks, doctor.Check{For: f, Name: "network namespaces", Status: doctor.Fail,
			Found: "this kernel has no network namespaces (no /proc/self/ns/net)", Fix: "use a kernel built with CONFIG_NET_NS, or --provider kind"})
	} else {
		checks = append(checks, doctor.Check{For: f, Name: "network namespaces", Status: doctor.Pass, Found: "/proc/self/ns/net"})
	}
	checks = append(checks, doctor.Tool(f, "ip", "iproute2"), doctor.Tool(f, "nsenter", "util-linux"))
	prog, err := p.labProgram()
	checks = append(checks, doctor.FromError(f, "k8sguide-lab", prog, err))
	if in, err := doctor.ReadInotify("/proc", 0); err != nil {
		checks = append(checks, doctor.Check{For: f, Name: "inotify instances", Status: doctor.Warn, Found: "not read: " + err.Error()})
	} else {
		checks = append(checks, doctor.InotifyCheck(f, in, doctor.InotifyPerLab))
	}
	dir := p.Store.Root
	for ; dir != "/" && !exists(dir); dir = filepath.Dir(dir) {
	}
	if d := diskProblem(dir); d != "" {
		checks = append(checks, doctor.Check{For: f, Name: "disk", Status: doctor.Fail, Found: d, Fix: "free some space there, or point K8SGUIDE_STATE_DIR at another disk"})
	} else if free := diskFree(dir); free >= 0 {
		checks = append(checks, doctor.Check{For: f, Name: "disk", Status: doctor.Pass, Found: fmt.Sprintf("%d MB free in %s", free>>20, dir)})
	}
	return checks
}

// dataplaneChecks are what a netns lab of dataplane d needs besides, from its lab face: kube-proxy's tools and
// the kernel parts they write to, or the agent's needs.
func (p *Provider) dataplaneChecks(d dataplanes.Name) []doctor.Check {
	f := ProviderName + "/" + string(d)
	face, _ := engines.Lab(d)
	var checks []doctor.Check
	switch face.Agent {
	case "":
		checks = append(checks, bridgeNetfilter(f))
		if face.KubeProxyMode == "ipvs" {
			checks = append(checks, ipvsKernel(f))
		}
		for _, t := range face.Tools {
			checks = append(checks, doctor.Tool(f, t.Command, t.Package))
			if t.Command == "iptables-restore" {
				checks = append(checks, iptablesKernel(f))
			}
		}
	case dataplanes.AgentCilium:
		checks = append(checks,
			doctor.FromError(f, "bpf filesystem", "bpf in /proc/filesystems", checkBPFFS()),
			doctor.FromError(f, "cgroup v2", "cgroup2 in /proc/filesystems", checkCgroup2()))
		clang, err := datapath.FindClang()
		checks = append(checks, doctor.FromError(f, "clang >= 18.1", clang.Path+" "+clang.Version, err))
		src, err := datapath.Sources()
		checks = append(checks, doctor.FromError(f, "Cilium's bpf sources", src, err))
		agent, err := p.agentPath()
		checks = append(checks, doctor.FromError(f, AgentName, agent, err))
	default:
		checks = append(checks, doctor.Check{For: f, Name: face.Agent, Status: doctor.Fail,
			Found: "the netns lab cannot run the " + face.Agent + " agent", Fix: "use --provider kind"})
	}
	return checks
}

// bridgeNetfilter: a node's pods sit on a bridge, whose traffic must pass netfilter (br_netfilter), or a reply
// between two pods of one node skips conntrack's reverse NAT; up sets bridge-nf-call-iptables in each node.
func bridgeNetfilter(f string) doctor.Check {
	c := doctor.Check{For: f, Name: "br_netfilter"}
	if exists("/proc/sys/net/bridge/bridge-nf-call-iptables") {
		c.Status, c.Found = doctor.Pass, "loaded (/proc/sys/net/bridge)"
		return c
	}
	c.Status, c.Found = doctor.Fail, "not loaded: no /proc/sys/net/bridge, and up sets bridge-nf-call-iptables in each node"
	c.Fix = "modprobe br_netfilter"
	if hasModule("br_netfilter") == moduleMissing {
		c.Fix = "this kernel has no br_netfilter module: use one built with CONFIG_BRIDGE_NETFILTER, or --provider kind"
	}
	return c
}

// iptablesKernel checks the kernel side of the iptables the host's iptables-restore writes: nf_tables for
// iptables-nft (probed with the rules, below), the legacy tables otherwise.
func iptablesKernel(f string) doctor.Check {
	c := doctor.Check{For: f, Name: "iptables backend"}
	out, err := exec.Command("iptables", "--version").Output()
	if err != nil {
		c.Status, c.Found, c.Fix = doctor.Fail, "iptables --version: "+errText(err), "install the iptables package"
		return c
	}
	version := strings.TrimSpace(string(out))
	switch {
	case strings.Contains(version, "nf_tables"):
		c.Status, c.Found = doctor.Pass, version+": rules go to nf_tables"
	case exists("/proc/net/ip_tables_names"):
		c.Status, c.Found = doctor.Pass, version+": ip_tables loaded"
	case hasModule("ip_tables") != moduleMissing:
		c.Status, c.Found = doctor.Pass, version+": ip_tables loads on first use"
	default:
		c.Status, c.Found, c.Fix = doctor.Fail, version+": this kernel has no ip_tables", "install iptables-nft (update-alternatives --set iptables /usr/sbin/iptables-nft)"
	}
	return c
}

const ipvsCheckName = "IPVS (ip_vs)"

// ipvsKernel: IPVS shows in /proc/net/ip_vs once its module is loaded, which the proxier does not do.
func ipvsKernel(f string) doctor.Check {
	c := doctor.Check{For: f, Name: ipvsCheckName}
	err := ipvs.CheckKernel()
	switch {
	case err == nil:
		c.Status, c.Found = doctor.Pass, "/proc/net/ip_vs"
	case errors.Is(err, ipvs.ErrNoKernelSupport) && hasModule("ip_vs") == moduleLoadable:
		c.Status, c.Found, c.Fix = doctor.Fail, "ip_vs is not loaded", "modprobe ip_vs"
	default:
		c.Status, c.Found = doctor.Fail, err.Error()
	}
	return c
}

type moduleState int

const (
	moduleMissing moduleState = iota
	moduleLoadable
	moduleBuiltIn
)

// hasModule says whether the running kernel has module name, built in or as a file modprobe can load.
func hasModule(name string) moduleState {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return moduleMissing
	}
	dir := filepath.Join("/lib/modules", unix.ByteSliceToString(u.Release[:]))
	if data, err := os.ReadFile(filepath.Join(dir, "modules.builtin")); err == nil && strings.Contains(string(data), "/"+name+".ko\n") {
		return moduleBuiltIn
	}
	if data, err := os.ReadFile(filepath.Join(dir, "modules.dep")); err == nil && strings.Contains(string(data), "/"+name+".ko") {
		return moduleLoadable
	}
	return moduleMissing
}

func errText(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return strings.TrimSpace(string(ee.Stderr))
	}
	return err.Error()
}

// probe tries what the lab asks of the kernel in a namespace of its own: the links a node is wired with, and the
// dataplane's kind of rules, using the matches and targets kube-proxy's rules use. The namespace is removed
// whatever happens (also on Ctrl-C: its removal runs to its end).
func (p *Provider) probe(ctx context.Context, ds []dataplanes.Name) []doctor.Check {
	ns := fmt.Sprintf("k8sguide-doctor-%d", os.Getpid())
	const f = ProviderName
	if err := ipUninterrupted("netns", "add", ns); err != nil {
		return []doctor.Check{{For: f, Name: "probe namespace", Status: doctor.Fail, Found: err.Error(), Fix: "run as root on a kernel with network namespaces"}}
	}
	defer ipUninterrupted("netns", "del", ns)
	var checks []doctor.Check
	links := doctor.Check{For: f, Name: "veth and bridge", Status: doctor.Pass, Found: "made in a namespace of their own"}
	for _, args := range [][]string{
		{"-n", ns, "link", "add", "doctor0", "type", "veth", "peer", "name", "doctor1"},
		{"-n", ns, "link", "add", "doctor2", "type", "bridge"},
	} {
		if err := IPCmd(ctx, args...); err != nil {
			links.Status, links.Found, links.Fix = doctor.Fail, err.Error(), "use a kernel with CONFIG_VETH and CONFIG_BRIDGE"
			break
		}
	}
	checks = append(checks, links)
	iptablesProbed := false
	for _, d := range ds {
		f := ProviderName + "/" + string(d)
		face, _ := engines.Lab(d)
		for _, t := range face.Tools {
			switch t.Command {
			case "iptables-restore":
				if iptablesProbed {
					continue
				}
				iptablesProbed = true
				checks = append(checks, probeRules(ctx, f, ns, "iptables rules", "iptables-restore", nil, iptablesProbeRules))
			case "nft":
				checks = append(checks, probeRules(ctx, f, ns, "nftables rules", "nft", []string{"-f", "-"}, nftablesProbeRules))
			}
		}
	}
	return checks
}

// iptablesProbeRules use the tables, matches and targets of kube-proxy's iptables rules.
const iptablesProbeRules = `*filter
:KUBE-DOCTOR - [0:0]
-A FORWARD -m conntrack --ctstate INVALID -j DROP
-A FORWARD -m comment --comment "k8sguide doctor" -m mark --mark 0x4000/0x4000 -j ACCEPT
COMMIT
*nat
:KUBE-DOCTOR-SVC - [0:0]
:KUBE-DOCTOR-SEP - [0:0]
-A PREROUTING -m comment --comment "k8sguide doctor" -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j KUBE-DOCTOR-SVC
-A KUBE-DOCTOR-SVC -m statistic --mode random --probability 0.50000000000 -j KUBE-DOCTOR-SEP
-A KUBE-DOCTOR-SEP -s 10.244.0.2/32 -j MARK --or-mark 0x4000
-A KUBE-DOCTOR-SEP -p tcp -m tcp -j DNAT --to-destination 10.244.0.2:80
-A POSTROUTING -m mark --mark 0x4000/0x4000 -j MASQUERADE --random-fully
COMMIT
`

// nftablesProbeRules use the objects and statements of kube-proxy's nftables rules.
const nftablesProbeRules = `table ip k8sguide-doctor {
	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		elements = { 10.96.0.10 . tcp . 80 : goto svc }
	}
	chain svc {
		numgen random mod 2 vmap { 0 : goto sep, 1 : goto sep }
	}
	chain sep {
		ip saddr 10.244.0.2 meta mark set meta mark | 0x4000
		meta l4proto tcp dnat to 10.244.0.2:80
	}
	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr . meta l4proto . th dport vmap @service-ips
	}
	chain filter-forward {
		type filter hook forward priority filter; policy accept;
		ct state invalid drop
	}
	chain nat-postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		meta mark & 0x4000 == 0x4000 masquerade fully-random
	}
}
`

// probeRules loads rules with tool in namespace ns.
func probeRules(ctx context.Context, f, ns, name, tool string, args []string, rules string) doctor.Check {
	c := doctor.Check{For: f, Name: name}
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + nsPath(ns), tool}, args...)...)
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		msg := strings.TrimSpace(string(out))
		if msg == "" {
			msg = err.Error()
		}
		c.Status, c.Found = doctor.Fail, fmt.Sprintf("%s refused rules like kube-proxy's: %s", tool, lab.FirstLine(msg))
		c.Fix = "the kernel lacks a netfilter feature kube-proxy uses (nf_tables, nf_nat, nf_conntrack, xt_statistic, …): use a distribution kernel, or --provider kind"
		return c
	}
	c.Status, c.Found = doctor.Pass, "loaded rules like kube-proxy's with "+tool+" in a namespace of their own"
	return c
}
