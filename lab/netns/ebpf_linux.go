package netns

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf"
	"github.com/k8sguide/k8sguide/dataplanes/ebpf/datapath"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/state"
	"github.com/k8sguide/k8sguide/lab/workload"
)

// The ebpf dataplane: each node runs Cilium's datapath, compiled for it, loaded and kept programmed by
// k8sguide-cilium (the nested module dataplanes/ebpf/cilium), wired as Cilium's native routing wires a node:
// bpf_host on eth0 and on cilium_host/cilium_net (which the agent makes, cilium_host holding the pods' gateway
// address), and for each pod a veth of its own (no bridge) whose host side carries bpf_lxc, loaded per endpoint
// by the agent once the pod has its address.

// AgentEnv overrides where k8sguide-cilium is.
const AgentEnv = "K8SGUIDE_CILIUM_AGENT"

// AgentName is the node agent's binary, built beside k8sguide by `make build`.
const AgentName = "k8sguide-cilium"

// ebpfDevices are the native devices bpf_host is attached to, NodePort device first.
var ebpfDevices = []string{"eth0"}

// checkEBPF says what this machine lacks to run Cilium's datapath, in one line, and otherwise returns the
// node agent to run.
func (p *Provider) checkEBPF() (agent string, err error) {
	if err := checkBPFFS(); err != nil {
		return "", err
	}
	if err := checkCgroup2(); err != nil {
		return "", err
	}
	if _, err := datapath.FindClang(); err != nil {
		return "", err
	}
	if _, err := datapath.Sources(); err != nil {
		return "", err
	}
	return p.agentPath()
}

// checkBPFFS tells whether the kernel can mount a bpf filesystem.
func checkBPFFS() error {
	ok, err := datapath.KernelHasBPFFS()
	if err != nil {
		return err
	}
	if !ok {
		return datapath.ErrNoBPFFS
	}
	return nil
}

// BPFFSDir is the lab's private bpf filesystem: a bpffs instance of its own, mounted in the lab's directory, so
// that its pins never meet Cilium's or another lab's in /sys/fs/bpf, and unmounting it removes them all. It is
// outside /sys, which `ip netns exec` remounts: every process in a node sees it.
func BPFFSDir(store state.Store, labName string) string {
	return filepath.Join(store.Dir(labName), "bpffs")
}

// NodeBPFFS is a node's directory in the lab's bpffs: maps in tc/globals (as on a Cilium node), links in links/.
func NodeBPFFS(store state.Store, labName, node string) string {
	return filepath.Join(BPFFSDir(store, labName), node)
}

func mountBPFFS(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := unix.Mount("bpffs", dir, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mounting a bpf filesystem on %s: %w", dir, err)
	}
	return nil
}

// unmountBPFFS removes the lab's bpffs, and with it every pin in it (the links: their programs detach unless
// an interface still holds them, and interfaces go with the namespaces).
func unmountBPFFS(dir string) error {
	mounted, err := mountedAs(dir, unix.BPF_FS_MAGIC)
	if err != nil {
		return err
	}
	if !mounted {
		return os.RemoveAll(dir) // made, never mounted (or gone already)
	}
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmounting %s: %w", dir, err)
	}
	return os.Remove(dir)
}

// nodeObjects are a node's compiled programs.
type nodeObjects struct{ host, lxc, sock string }

// coldCompileTime is how long compileNodes takes with nothing cached, on 2 idle cores (11 s, 2026-12-02; a
// loaded machine took 91 s): a whole cold up took 19 s, a warm one 10 s.
const coldCompileTime = "10-15 s"

// nodeObject is one of a node's programs to build and the directory it is kept in.
type nodeObject struct {
	node string
	plan *datapath.Plan
	dir  string
}

// planObjects plans bpf_host, bpf_lxc and bpf_sock for every node: the node's address, its pods' gateway and
// (bpf_sock) its network namespace's cookie, which cookie gives, are compiled in. bpf_host and bpf_lxc are kept
// in the cache, for the next lab; bpf_sock, which no other lab can use, in labDir, and goes with the lab.
func planObjects(nodes []lab.Node, labDir string, cookie func(ns string) (uint64, error)) ([]nodeObject, error) {
	clang, err := datapath.FindClang()
	if err != nil {
		return nil, err
	}
	var out []nodeObject
	for _, n := range nodes {
		gw, err := workload.Gateway(n.PodCIDR)
		if err != nil {
			return nil, err
		}
		c, err := cookie(n.Name)
		if err != nil {
			return nil, err
		}
		for _, prog := range []datapath.Program{datapath.Host, datapath.LXC, datapath.Sock} {
			o := datapath.Options{Program: prog, NodeIP: netip.MustParseAddr(n.IP), RouterIP: gw.Addr()}
			dir := datapath.CacheDir()
			if prog == datapath.Sock {
				o.HostNetnsCookie, dir = c, labDir
			}
			plan, err := datapath.NewPlan(o, clang)
			if err != nil {
				return nil, err
			}
			out = append(out, nodeObject{node: n.Name, plan: plan, dir: dir})
		}
	}
	return out, nil
}

// uncachedObjects is how many of objects' bpf_host and bpf_lxc are not in the cache yet: what makes a first
// ebpf lab wait for clang where the next one does not.
func uncachedObjects(objects []nodeObject) int {
	n := 0
	for _, o := range objects {
		if o.plan.Program() != datapath.Sock && !o.plan.Cached(o.dir) {
			n++
		}
	}
	return n
}

// compileNodes builds objects all at once (one clang per program and node), or finds them built.
func compileNodes(ctx context.Context, objects []nodeObject) (map[string]nodeObjects, error) {
	objs := map[string]nodeObjects{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	for _, o := range objects {
		wg.Go(func() {
			obj, err := o.plan.Compile(ctx, o.dir)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			no := objs[o.node]
			switch o.plan.Program() {
			case datapath.Host:
				no.host = obj
			case datapath.LXC:
				no.lxc = obj
			case datapath.Sock:
				no.sock = obj
			}
			objs[o.node] = no
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return objs, nil
}

// ebpfProxyArgv is the command line of a node's k8sguide-cilium.
func (p *Provider) ebpfProxyArgv(agent, kubeconfig, cgroup string, cfg lab.Config, n lab.Node, objs nodeObjects) []string {
	alg := cfg.LBAlgorithm
	if alg == "" {
		alg = ebpf.LBRandom
	}
	gw, _ := workload.Gateway(n.PodCIDR) // compileNodes parsed it
	return []string{agent, "node",
		"--node", n.Name,
		"--node-ip", n.IP,
		"--object", objs.host,
		"--lxc-object", objs.lxc,
		"--sock-object", objs.sock,
		// The node's cgroup, which every process of the node runs in (Cilium's --cgroup-root).
		"--cgroup-root", nodeCgroup(cgroup, n.Name),
		"--pod-cidr", n.PodCIDR,
		"--router-ip", gw.Addr().String(),
		"--pod-netns-prefix", PodNamespace(cfg.Name, ""),
		"--bpffs", NodeBPFFS(p.Store, cfg.Name, n.Name),
		"--devices", strings.Join(ebpfDevices, ","),
		"--lb-algorithm", alg,
		"--nodeport-range", cfg.NodePortRange,
		// The agent watches the apiserver with kube-proxy's credentials (system:node-proxier may read Services,
		// EndpointSlices and Nodes), as cilium-agent does with its own.
		"--kubeconfig", kubeconfig,
	}
}

// netnsCookie is the cookie of network namespace ns (SO_NETNS_COOKIE of a socket made in it): what bpf_sock
// calls the host's namespace on that node.
func netnsCookie(ns string) (uint64, error) {
	var cookie uint64
	err := InNamespace(ns, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		cookie, err = unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
		if err != nil {
			return fmt.Errorf("the network namespace cookie of %s (SO_NETNS_COOKIE, Linux 5.14+): %w", ns, err)
		}
		return nil
	})
	return cookie, err
}
