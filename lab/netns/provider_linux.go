package netns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"golang.org/x/sys/unix"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/ebpf/datapath"
	"github.com/k8sguide/k8sguide/dataplanes/engines"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/controlplane"
	"github.com/k8sguide/k8sguide/lab/kubeconfig"
	"github.com/k8sguide/k8sguide/lab/nodecmd"
	"github.com/k8sguide/k8sguide/lab/state"
	"github.com/k8sguide/k8sguide/lab/workload"
)

// ProviderName is the name of this provider.
const ProviderName = "netns"

// Node network, as kind's Docker network: the client (Docker's bridge side) is .1, nodes follow.
const (
	nodeNetwork = "172.18.0.0/16"
	clientIP    = "172.18.0.1"
)

// Provider builds labs of network namespaces.
type Provider struct {
	Store state.Store
	// Exe is the k8sguide binary: the lab's programs (k8sguide-lab, k8sguide-cilium) are looked for beside it, and
	// it collects a node's snapshot (its hidden `internal collect`).
	Exe string
}

// New returns a provider using the default state store and the running binary.
func New() (*Provider, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return &Provider{Store: state.Default(), Exe: exe}, nil
}

var _ lab.Provider = (*Provider)(nil)

func (p *Provider) Name() string { return ProviderName }

func checkRoot() error {
	if os.Geteuid() != 0 {
		return errors.New("the netns provider needs root (network namespaces, iptables/nftables): run k8sguide as root, e.g. with sudo")
	}
	return nil
}

func nodeIP(i int) string { return fmt.Sprintf("172.18.0.%d", i+2) }

// validateConfig checks everything `up` is given before anything is made.
func validateConfig(cfg *lab.Config) error {
	if err := cfg.Validate(200); err != nil {
		return err
	}
	for flag, set := range map[string]bool{"--image": cfg.Image != "", "--kubernetes-version": cfg.KubernetesVersion != "", "--retain": cfg.Retain} {
		if set {
			return fmt.Errorf("%s is for the kind provider: a netns lab runs the Kubernetes %s built into k8sguide, with no node image or cluster to keep", flag, controlplane.KubernetesVersion)
		}
	}
	return nil
}

// Create builds a lab. On any failure, or when ctx is cancelled (Ctrl-C), it removes what it made.
func (p *Provider) Create(ctx context.Context, cfg lab.Config, progress io.Writer) (err error) {
	if err := validateConfig(&cfg); err != nil {
		return err
	}
	if _, err := ResyncPeriod(); err != nil {
		return err // kube-proxy's configuration would hold it
	}
	if err := p.CheckHost(cfg.Dataplane); err != nil {
		return err
	}
	// The lab's own programs, found before anything is made.
	prog, err := p.labProgram()
	if err != nil {
		return err
	}
	var agent string
	if lab.RunsCilium(cfg.Dataplane) {
		if agent, err = p.checkEBPF(); err != nil {
			return err
		}
	}
	names := lab.NodeNames(cfg.Name, cfg.Workers)
	namespaces := append([]string{lab.ClientName(cfg.Name)}, names...)
	h, err := p.Store.Create(cfg.Name)
	if err != nil {
		return err
	}
	// etcd cannot start on a full disk, and would only panic in a loop: say so before anything is made.
	if d := diskProblem(p.Store.Dir(cfg.Name)); d != "" {
		h.Remove()
		return errors.New(d)
	}
	for _, ns := range namespaces {
		if nsExists(ns) {
			h.Remove()
			if mark, ok := strings.CutPrefix(markOf(ctx, ns), markPrefix); ok {
				owner, root, _ := strings.Cut(mark, " ")
				return fmt.Errorf("network namespace %s is left from lab %s (state in %s), whose state is gone: remove it with K8SGUIDE_STATE_DIR=%s k8sguide down --name %s", ns, owner, root, root, owner)
			}
			return fmt.Errorf("network namespace %s already exists but belongs to no k8sguide lab; remove it (ip netns del %s) or pick another --name", ns, ns)
		}
	}
	st := &state.Lab{Config: cfg, Provider: ProviderName, Phase: state.Creating, Namespaces: namespaces}
	for i, n := range names {
		role := lab.Worker
		if i == 0 {
			role = lab.ControlPlane
		}
		// The pod CIDR is the controller-manager's to give; joinNodes records it.
		st.Nodes = append(st.Nodes, lab.Node{Name: n, Role: role, IP: nodeIP(i)})
	}
	defer func() {
		if err != nil {
			// Clean up with a fresh context: ctx may be the one Ctrl-C cancelled.
			cleanup, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			terr := p.teardown(cleanup, st)
			if ctx.Err() != nil {
				// Stopped by the user: what the logs hold is the signal's doing, and a directory kept for
				// them would be left behind by a Ctrl-C. Say what became of the half-made lab.
				err = withoutLogs(err, p.Store.Dir(cfg.Name))
				if terr == nil {
					err = fmt.Errorf("%w; what up had made of lab %s is removed", err, cfg.Name)
				}
			} else {
				err = keepLogs(err, p.Store.Dir(cfg.Name))
			}
			h.Remove()
		}
	}()
	if err = h.Save(st); err != nil {
		return err
	}

	// Like kind, one line per step, ticked when it is done.
	done := func(msg string) { fmt.Fprintf(progress, " ✓ %s\n", msg) }
	fmt.Fprintf(progress, "Creating lab %q (provider netns, dataplane %s) ...\n", cfg.Name, cfg.Dataplane)
	if err = p.makeClient(ctx, cfg.Name); err != nil {
		return err
	}
	for i := range st.Nodes {
		if err = p.makeNode(ctx, cfg, i, st.Nodes[i]); err != nil {
			return err
		}
	}
	if lab.RunsCilium(cfg.Dataplane) {
		// Each node's processes run in a cgroup of its own, which its socket LB is attached to.
		st.Cgroup = labCgroup(p.Store, cfg.Name)
		if err = h.Save(st); err != nil {
			return err
		}
		if err = makeCgroups(p.Store, cfg.Name, names); err != nil {
			return err
		}
	}
	done(fmt.Sprintf("Preparing nodes %s", strings.Repeat("📦 ", len(names))))

	if err = p.startControlPlane(ctx, h, st); err != nil {
		return err
	}
	done("Starting control-plane 🕹️")
	if err = p.joinNodes(ctx, h, st); err != nil {
		return err
	}
	done("Joining worker nodes 🚜")
	if err = p.wirePodNetworks(ctx, st); err != nil {
		return err
	}
	if lab.RunsCilium(cfg.Dataplane) {
		done("Routing each node's pod CIDR to its node (Cilium's native routing) 🔌")
	} else {
		done("Wiring each node's pod network and the routes between them (like kindnet) 🔌")
	}

	argv := func(n lab.Node) []string {
		return nodecmd.KubeProxyArgv(prog, KubeProxyConfigPath(p.Store, cfg.Name), n.Name)
	}
	if lab.RunsCilium(cfg.Dataplane) {
		// The first ebpf lab compiles Cilium's datapath: seconds on an idle machine, a minute and more on a busy
		// one. Say so before the wait rather than leave the student at a silent terminal.
		objects, err := planObjects(st.Nodes, p.Store.Dir(cfg.Name), netnsCookie)
		if err != nil {
			return err
		}
		if n := uncachedObjects(objects); n > 0 {
			fmt.Fprintf(progress, "   First ebpf lab here: compiling %d Cilium programs (%s on 2 idle cores, longer when busy)…\n",
				n, coldCompileTime)
		}
		objs, err := compileNodes(ctx, objects)
		if err != nil {
			return err
		}
		done(fmt.Sprintf("Compiling Cilium %s bpf_host, bpf_lxc and bpf_sock for each node 🐝", datapath.CiliumVersion))
		st.BPFFS = BPFFSDir(p.Store, cfg.Name)
		if err = h.Save(st); err != nil {
			return err
		}
		if err = mountBPFFS(st.BPFFS); err != nil {
			return err
		}
		kubeconfig := ControlPlaneConfig(p.Store, st.Config, st.Nodes).ProxyKubeconfig()
		argv = func(n lab.Node) []string {
			return p.ebpfProxyArgv(agent, kubeconfig, st.Cgroup, st.Config, n, objs[n.Name])
		}
	}
	for _, n := range st.Nodes {
		// As kind's proxy pods see their node's /sys, so does a netns node's proxy.
		run := append([]string{"ip", "netns", "exec", n.Name}, argv(n)...)
		if err = writeProxyManifest(p.Store, cfg.Name, n.Name, run); err != nil {
			return err
		}
	}
	if err = p.waitProxies(ctx, st); err != nil {
		return err
	}
	st.Phase = state.Ready
	if err = h.Save(st); err != nil {
		return err
	}
	if lab.RunsCilium(cfg.Dataplane) {
		done(fmt.Sprintf("Loading Cilium's datapath: bpf_host (%s, cilium_host), bpf_lxc per pod, bpf_sock per node 🔧", strings.Join(ebpfDevices, ", ")))
	} else {
		done(fmt.Sprintf("Starting kube-proxy (%s mode) on every node 🔧", cfg.Dataplane))
	}
	st.Config.Kubeconfig = kubeconfig.Path(cfg.Kubeconfig)
	if err = h.Save(st); err != nil {
		return err
	}
	if err = p.writeUserKubeconfig(st); err != nil {
		return err
	}
	h.Close()
	// Three short lines, not one: a long kubeconfig path must not push a 100-column terminal into wrapping.
	fmt.Fprintf(progress, "Lab %q is ready.\nKubeconfig: %s (context %s)\nNodes:\n", cfg.Name, st.Config.Kubeconfig, KubeContext(cfg.Name))
	for _, n := range st.Nodes {
		fmt.Fprintf(progress, "  %-28s %-14s %s\n", n.Name, n.Role, n.IP)
	}
	fmt.Fprintf(progress, "Next: k8sguide deploy --name %s && k8sguide nodeport --name %s\n", cfg.Name, cfg.Name)
	lab.PrintGuideAliases(progress, cfg)
	return nil
}

func (p *Provider) makeClient(ctx context.Context, labName string) error {
	ns := lab.ClientName(labName)
	if err := AddNamespace(ctx, ns, LabMark(p.Store, labName)); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "link", "add", "br0", "type", "bridge"},
		{"-n", ns, "link", "set", "br0", "address", bridgeMAC(netip.MustParseAddr(clientIP))},
		{"-n", ns, "addr", "add", clientIP + "/16", "dev", "br0"},
		{"-n", ns, "link", "set", "br0", "up"},
	} {
		if err := IPCmd(ctx, args...); err != nil {
			return err
		}
	}
	return nil
}

// makeNode creates a node namespace: eth0 on the client's bridge (like a kind node on Docker's bridge), a default
// route to the client, and the pod bridge cni0, which gets its address once the node has its pod CIDR. An ebpf
// node has no bridge: its agent makes cilium_host, and each pod gets a veth of its own, as Cilium wires them.
// AddNamespace makes a namespace with its lab's mark; one that could not be marked is removed again. The add and
// the mark run to their end even when ctx is cancelled (they take milliseconds): an `ip netns add` killed by a
// Ctrl-C can leave a namespace without the mark, which the lab's rollback would not take for its own and would
// leave behind. The cancellation is reported once the namespace is marked, so the rollback removes it.
func AddNamespace(ctx context.Context, ns, mark string) error {
	if err := ipUninterrupted("netns", "add", ns); err != nil {
		return err
	}
	if err := markNamespace(ns, mark); err != nil {
		ipUninterrupted("netns", "del", ns)
		return err
	}
	return ctx.Err()
}

func (p *Provider) makeNode(ctx context.Context, cfg lab.Config, i int, n lab.Node) error {
	client := lab.ClientName(cfg.Name)
	port := fmt.Sprintf("veth-node%d", i)
	if err := AddNamespace(ctx, n.Name, LabMark(p.Store, cfg.Name)); err != nil {
		return err
	}
	cmds := [][]string{
		{"-n", n.Name, "link", "set", "lo", "up"},
		{"-n", client, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", n.Name},
		{"-n", client, "link", "set", port, "master", "br0", "up"},
		{"-n", n.Name, "addr", "add", n.IP + "/16", "dev", "eth0"},
		{"-n", n.Name, "link", "set", "eth0", "up"},
		{"-n", n.Name, "route", "add", "default", "via", clientIP},
	}
	if lab.RunsCilium(cfg.Dataplane) {
		for _, args := range cmds {
			if err := IPCmd(ctx, args...); err != nil {
				return err
			}
		}
		return setSysctls(n.Name, map[string]string{"net/ipv4/ip_forward": "1"})
	}
	for _, args := range append(cmds, []string{"-n", n.Name, "link", "add", "cni0", "type", "bridge"}) {
		if err := IPCmd(ctx, args...); err != nil {
			return err
		}
	}
	// A node forwards for its pods; bridged pod traffic must pass netfilter, or replies from a pod on the same
	// bridge skip conntrack's reverse NAT (kube-proxy's documented br_netfilter requirement).
	return setSysctls(n.Name, map[string]string{
		"net/ipv4/ip_forward":                "1",
		"net/bridge/bridge-nf-call-iptables": "1",
	})
}

// wirePodNetworks does what kindnet does with the pod CIDRs the controller-manager gave the nodes: each node's
// pod bridge holds the first address of its CIDR (the pods' gateway), and each node routes the other nodes' CIDRs
// via their addresses. On an ebpf lab the routes are Cilium's native routing with auto-direct-node-routes, and
// the gateway is cilium_host's, which the node's agent makes.
func (p *Provider) wirePodNetworks(ctx context.Context, st *state.Lab) error {
	for _, n := range st.Nodes {
		gw, err := workload.Gateway(n.PodCIDR)
		if err != nil {
			return err
		}
		var cmds [][]string
		if !lab.RunsCilium(st.Config.Dataplane) {
			cmds = [][]string{
				{"-n", n.Name, "link", "set", "cni0", "address", bridgeMAC(gw.Addr())},
				{"-n", n.Name, "addr", "add", gw.String(), "dev", "cni0"},
				{"-n", n.Name, "link", "set", "cni0", "up"},
			}
		}
		for _, other := range st.Nodes {
			if other.Name != n.Name {
				cmds = append(cmds, []string{"-n", n.Name, "route", "add", other.PodCIDR, "via", other.IP, "dev", "eth0"})
			}
		}
		for _, args := range cmds {
			if err := IPCmd(ctx, args...); err != nil {
				return err
			}
		}
	}
	return nil
}

// bridgeMAC is the fixed hardware address of a bridge that holds addr, made from it as the CNI plugins do
// (0a:58 and the IPv4 address). A bridge without one takes the lowest MAC of its ports and changes it when
// that port goes: every pod that cached the gateway's old MAC then sends frames the bridge floods instead of
// routing — its packets pass nat PREROUTING (br_netfilter) and vanish, until the pod's ARP entry expires.
func bridgeMAC(addr netip.Addr) string {
	a := addr.As4()
	return fmt.Sprintf("0a:58:%02x:%02x:%02x:%02x", a[0], a[1], a[2], a[3])
}

// Delete removes a lab: every process in its namespaces, the namespaces (with their veths), and its state. A
// lab whose state file is lost or unreadable (or whose directory is gone) is found in the kernel by its
// namespaces' marks and removed all the same; a state file that names another lab is refused.
func (p *Provider) Delete(ctx context.Context, name string) error {
	h, err := p.Store.Lock(name)
	if err != nil {
		var notFound *lab.NotFoundError
		if errors.As(err, &notFound) {
			if own, _ := ownNamespaces(ctx, p.Store, name); len(own) > 0 {
				st := p.found(name)
				if err := p.teardown(ctx, st); err != nil {
					return err
				}
				return kubeconfig.Remove(st.Config.Kubeconfig, KubeContext(name))
			}
		}
		return err
	}
	defer h.Close()
	st, err := h.Load()
	switch {
	case err != nil && !errors.Is(err, state.ErrNoState) && !errors.Is(err, state.ErrCorrupt):
		return err
	case err != nil:
		// What the kernel shows of the lab is what there is to remove.
		st = p.found(name)
	case st.Config.Name != name:
		return fmt.Errorf("lab %s: its state file (%s) describes lab %q, not this one: left alone; remove the file if it is stale, then run down again", name, p.Store.StatePath(name), st.Config.Name)
	}
	// Commands that meet the lab while it goes say so, not that its nodes are sick (removalPath).
	_ = WriteProcRecord(removalPath(p.Store, name), os.Getpid(), "")
	if err := p.teardown(ctx, st); err != nil {
		return err
	}
	if st.Config.Kubeconfig != "" {
		if err := kubeconfig.Remove(st.Config.Kubeconfig, KubeContext(name)); err != nil {
			return fmt.Errorf("removing context %s from %s: %w", KubeContext(name), st.Config.Kubeconfig, err)
		}
	}
	return h.Remove()
}

// found is what the kernel and the filesystem show of lab name without its state: its bpf filesystem and
// cgroup where they are (its namespaces teardown finds by their marks), and its context in the default
// kubeconfig, where `up` puts it unless told otherwise.
func (p *Provider) found(name string) *state.Lab {
	st := &state.Lab{Config: lab.Config{Name: name, Kubeconfig: kubeconfig.Path("")}}
	if ok, _ := mountedAs(BPFFSDir(p.Store, name), unix.BPF_FS_MAGIC); ok {
		st.BPFFS = BPFFSDir(p.Store, name)
	}
	if exists(labCgroup(p.Store, name)) {
		st.Cgroup = labCgroup(p.Store, name)
	}
	return st
}

// keepLogs moves the logs a failed `up`'s error names out of the lab's directory, which the rollback removes,
// to a private directory of their own, and makes the error name them there.
func keepLogs(err error, labDir string) error {
	if !strings.Contains(err.Error(), labDir+"/") && !strings.Contains(err.Error(), "logs: "+labDir) {
		return err
	}
	kept, kerr := os.MkdirTemp("", "k8sguide-failed-up-")
	if kerr != nil {
		return err
	}
	logs, _ := filepath.Glob(filepath.Join(labDir, "*.log"))
	for _, l := range logs {
		// Copied, not renamed: /tmp and the state's /run are often two filesystems.
		if data, err := os.ReadFile(l); err == nil {
			os.WriteFile(filepath.Join(kept, filepath.Base(l)), data, 0o600)
		}
	}
	return &movedLogsError{err: err, from: labDir, to: kept}
}

// withoutLogs is err without the "(log: …)" and "(logs: …)" that name files in labDir, which the rollback
// removes.
func withoutLogs(err error, labDir string) error {
	re := regexp.MustCompile(` \(logs?: ` + regexp.QuoteMeta(labDir) + `(/[^)]*)?\)`)
	if !re.MatchString(err.Error()) {
		return err
	}
	return &rewordedError{err: err, msg: re.ReplaceAllString(err.Error(), "")}
}

// rewordedError is an error said otherwise, still wrapping what it was.
type rewordedError struct {
	err error
	msg string
}

func (e *rewordedError) Error() string { return e.msg }
func (e *rewordedError) Unwrap() error { return e.err }

// movedLogsError is an error whose log paths moved from one directory to another.
type movedLogsError struct {
	err      error
	from, to string
}

func (e *movedLogsError) Error() string { return strings.ReplaceAll(e.err.Error(), e.from, e.to) }
func (e *movedLogsError) Unwrap() error { return e.err }

// teardown removes what a lab is made of: its nodes' namespaces first (their inits and agents, the control
// plane and the proxies), then its pods' namespaces, the client's, and the lab's bpf filesystem. It removes
// only namespaces that bear the lab's mark, whether or not its state lists them (a namespace its state lists
// without the mark is refused, not removed).
func (p *Provider) teardown(ctx context.Context, st *state.Lab) error {
	var errs []error
	name := st.Config.Name
	own, err := ownNamespaces(ctx, p.Store, name)
	if err != nil {
		return err
	}
	marked := map[string]bool{}
	for _, ns := range own {
		marked[ns] = true
	}
	for _, ns := range st.Namespaces {
		if nsExists(ns) && !marked[ns] {
			errs = append(errs, fmt.Errorf("lab %s: its state names namespace %q, which does not bear the lab's mark: left alone", name, ns))
		}
	}
	pod := podNamespacePattern(name)
	var nodes, pods, client []string
	for _, ns := range own {
		switch {
		case ns == lab.ClientName(name):
			client = append(client, ns)
		case pod.MatchString(ns):
			pods = append(pods, ns)
		default:
			nodes = append(nodes, ns)
		}
	}
	for _, ns := range slices.Concat(nodes, pods, client) {
		if err := RemoveNamespace(ctx, ns); err != nil {
			errs = append(errs, err)
		}
	}
	// Last, once the agents are stopped and the interfaces that held the programs are gone: the pins.
	if st.BPFFS != "" {
		if st.BPFFS != BPFFSDir(p.Store, name) {
			errs = append(errs, fmt.Errorf("lab %s: its state names bpf filesystem %q, which is not the lab's: left alone", name, st.BPFFS))
		} else if err := unmountBPFFS(st.BPFFS); err != nil {
			errs = append(errs, err)
		}
	}
	// And the cgroups, which the processes have left.
	if st.Cgroup != "" {
		if st.Cgroup != labCgroup(p.Store, name) {
			errs = append(errs, fmt.Errorf("lab %s: its state names cgroup %q, which is not the lab's: left alone", name, st.Cgroup))
		} else if err := removeCgroups(p.Store, name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// List names the labs in the store, and those the kernel holds without one (their state lost: `down` removes
// them).
func (p *Provider) List(ctx context.Context) ([]string, error) {
	names, err := p.Store.List()
	if err != nil {
		return nil, err
	}
	for _, n := range KernelLabs(ctx, p.Store) {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names, nil
}

func (p *Provider) Status(ctx context.Context, name string) (lab.Status, error) {
	st, err := p.Store.View(name)
	if err != nil {
		return lab.Status{}, err
	}
	s := lab.Status{Name: name, Provider: ProviderName, Dataplane: st.Config.Dataplane, Nodes: slices.Clone(st.Nodes), Client: clientIP, Proxies: map[string]lab.ProxyStatus{}, BPFFS: st.BPFFS,
		NodePortAddresses: st.Config.NodePortAddresses, NodePortRange: st.Config.NodePortRange}
	if face, _ := engines.Lab(s.Dataplane); face.Agent == dataplanes.AgentCilium {
		s.LBAlgorithm = st.Config.LBAlgorithm
		if s.LBAlgorithm == "" {
			s.LBAlgorithm = face.LBAlgorithms[0] // up's default
		}
	}
	for _, n := range st.Nodes {
		s.Proxies[n.Name] = lab.ProxyStatus{Running: p.proxyPID(name, n.Name) != 0}
	}
	if problems := p.nodeProblems(st); len(problems) > 0 {
		s.Problems = problems
	}
	return s, nil
}

// proxyPID is the pid of the node's running proxy (0: none runs).
func (p *Provider) proxyPID(labName, node string) int {
	return livePID(ProxyRecord(p.Store, labName, node))
}

// namespaceOf resolves what `exec` may name: a node or the client, by full or short name (worker2:
// lab.ResolveNode), or a pod, by name in any Kubernetes namespace (the first found) or as pod/NAME or
// pod/NAMESPACE/NAME, and says which node it is or runs on ("" for the client).
func (p *Provider) namespaceOf(ctx context.Context, st *state.Lab, name, target string) (ns, node string, err error) {
	known := []string{}
	for _, n := range st.Nodes {
		known = append(known, n.Name)
	}
	known = append(known, lab.ClientName(name))
	podNS, pod, isPod := lab.PodRef(target)
	notFound := &lab.NotFoundError{Kind: "pod", Name: target}
	if !isPod {
		n, err := lab.ResolveNode(known, name, target)
		if err == nil {
			if n == lab.ClientName(name) {
				return n, "", nil
			}
			return n, n, nil
		}
		if !errors.As(err, &notFound) {
			return "", "", err
		}
		notFound.Kind, pod = "node or pod", target
	}
	if cs, err := p.clientset(name); err == nil {
		if pods, err := cs.CoreV1().Pods(podNS).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + pod}); err == nil {
			for _, po := range pods.Items {
				if po.Status.PodIP != "" {
					return PodNamespace(name, po.UID), po.Spec.NodeName, nil
				}
			}
		}
	}
	return "", "", notFound
}

// Exec runs argv inside a node, the client or a pod, as `docker exec` does for a kind node. Its exit status is
// returned as an *exec.ExitError.
func (p *Provider) Exec(ctx context.Context, name, target string, argv []string, streams lab.Streams) error {
	if len(argv) == 0 {
		return errors.New("no command given: k8sguide exec NODE -- COMMAND [ARG...]")
	}
	st, err := p.Store.View(name)
	if err != nil {
		return err
	}
	ns, node, err := p.namespaceOf(ctx, st, name, target)
	if err != nil {
		return err
	}
	if err := checkRoot(); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns}, argv...)...)
	// A node's command, or a pod's, runs in the node's cgroup, as the node's own processes do (on an ebpf lab:
	// the node's socket LB sees its sockets).
	if st.Cgroup != "" && node != "" {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
		done, err := inCgroup(cmd.SysProcAttr, nodeCgroup(st.Cgroup, node))
		if err != nil {
			return err
		}
		defer done()
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = streams.In, streams.Out, streams.Err
	// On cancel (Ctrl-C) ask first: `ip netns exec` has become the command, which may have things to undo
	// (the kernel tracer removes its table). Kill it if it does not finish soon.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	return cmd.Run()
}

// ToolPath is this binary: a netns node shares the host's filesystem.
func (p *Provider) ToolPath(ctx context.Context, name, node string) (string, error) {
	if _, err := p.Store.View(name); err != nil {
		return "", err
	}
	return p.Exe, nil
}

// Get makes one HTTP request from the lab's client to addr and reports which pod answered.
func (p *Provider) Get(ctx context.Context, name, addr string) (lab.Reply, error) {
	if _, err := p.Store.View(name); err != nil {
		return lab.Reply{}, err
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return lab.Reply{}, fmt.Errorf("address %q: want IP:PORT", addr)
	}
	return httpGet(ctx, lab.ClientName(name), addr)
}

// waitProxies waits until every node's proxy serves: kube-proxy's /healthz (which answers 200 once its first
// sync is done) on the node's address, from the client; Cilium's agent once its service map is pinned. Whether
// each Service is in the kernel is checked by the commands (inspect/live), exactly.
func (p *Provider) waitProxies(ctx context.Context, st *state.Lab) error {
	for _, n := range st.Nodes {
		ready := func(ctx context.Context) (bool, error) {
			return httpOK(ctx, lab.ClientName(st.Config.Name), net.JoinHostPort(n.IP, "10256"), "/healthz") == nil, nil
		}
		if lab.RunsCilium(st.Config.Dataplane) {
			ready = func(ctx context.Context) (bool, error) {
				_, err := os.Stat(filepath.Join(NodeBPFFS(p.Store, st.Config.Name, n.Name), "tc", "globals", "cilium_lb4_services_v2"))
				return err == nil, nil
			}
		}
		if err := p.waitCluster(ctx, st, "the proxy of "+n.Name, func(ctx context.Context) (bool, error) {
			if _, err := os.Stat(ProxyRecord(p.Store, st.Config.Name, n.Name)); err == nil && p.proxyPID(st.Config.Name, n.Name) == 0 {
				log := ProxyLog(p.Store, st.Config.Name, n.Name)
				return false, fmt.Errorf("the proxy of %s stopped: %s (log: %s)", n.Name, LastLogLine(log), log)
			}
			return ready(ctx)
		}); err != nil {
			return err
		}
	}
	return nil
}

func tail(path string, lines int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
