package kind

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
	kindexec "sigs.k8s.io/kind/pkg/exec"
)

// fakeNode is a kind node whose filesystem is a map: it answers the commands the provider runs in nodes
// (uname, sha256sum, cat, mkdir, tee, chmod, mv) and records every argv.
type fakeNode struct {
	name, role, ip, machine string
	mu                      sync.Mutex
	files                   map[string][]byte
	modes                   map[string]string
	ran                     [][]string
	// exit, when set, is what any other command returns.
	exit error
	// pids are the node's containers' processes, by container ID (crictl inspect).
	pids map[string]string
	// sysctls are the node's settings sysctl reads and writes (unset: 1).
	sysctls map[string]string
}

func newFakeNode(name, role, ip string) *fakeNode {
	return &fakeNode{name: name, role: role, ip: ip, machine: "x86_64", modes: map[string]string{}, files: map[string][]byte{
		// Every capability, and a cgroup namespace of the node's own (as kind's nodes on Docker).
		"/proc/1/status":    []byte("Name:\tsystemd\nCapBnd:\t000001ffffffffff\n"),
		"/proc/1/ns/cgroup": []byte("cgroup:[" + name + "]"),
	}}
}

func (n *fakeNode) String() string              { return n.name }
func (n *fakeNode) Role() (string, error)       { return n.role, nil }
func (n *fakeNode) IP() (string, string, error) { return n.ip, "", nil }
func (n *fakeNode) SerialLogs(io.Writer) error  { return nil }
func (n *fakeNode) Command(c string, a ...string) kindexec.Cmd {
	return n.CommandContext(context.Background(), c, a...)
}
func (n *fakeNode) CommandContext(_ context.Context, c string, a ...string) kindexec.Cmd {
	return &fakeCmd{node: n, argv: append([]string{c}, a...)}
}

func (n *fakeNode) commands() [][]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([][]string(nil), n.ran...)
}

type fakeCmd struct {
	node           *fakeNode
	argv           []string
	stdin          io.Reader
	stdout, stderr io.Writer
}

func (c *fakeCmd) SetEnv(...string) kindexec.Cmd      { return c }
func (c *fakeCmd) SetStdin(r io.Reader) kindexec.Cmd  { c.stdin = r; return c }
func (c *fakeCmd) SetStdout(w io.Writer) kindexec.Cmd { c.stdout = w; return c }
func (c *fakeCmd) SetStderr(w io.Writer) kindexec.Cmd { c.stderr = w; return c }

func (c *fakeCmd) Run() error {
	n := c.node
	n.mu.Lock()
	defer n.mu.Unlock()
	n.ran = append(n.ran, c.argv)
	out := c.stdout
	if out == nil {
		out = io.Discard
	}
	fail := func(msg string) error {
		if c.stderr != nil {
			fmt.Fprintln(c.stderr, msg)
		}
		return &kindexec.RunError{Command: c.argv, Inner: fmt.Errorf("exit status 1")}
	}
	switch a := c.argv; a[0] {
	case "uname":
		fmt.Fprintln(out, n.machine)
	case "sha256sum":
		data, ok := n.files[a[1]]
		if !ok {
			return fail("sha256sum: " + a[1] + ": No such file or directory")
		}
		sum := sha256.Sum256(data)
		fmt.Fprintf(out, "%s  %s\n", hex.EncodeToString(sum[:]), a[1])
	case "crictl": // crictl inspect … --template {{.info.pid}} ID: a container's pid, from its ID
		if pid, ok := n.pids[a[len(a)-1]]; ok {
			fmt.Fprintln(out, pid)
		} else {
			return fail("no such container")
		}
	case "sysctl": // sysctl -n KEY, sysctl -w KEY=VALUE
		if n.sysctls == nil {
			n.sysctls = map[string]string{}
		}
		if a[1] == "-w" {
			k, v, _ := strings.Cut(a[2], "=")
			n.sysctls[k] = v
		} else if v, ok := n.sysctls[a[2]]; ok {
			fmt.Fprintln(out, v)
		} else {
			fmt.Fprintln(out, "1")
		}
	case "cat":
		data, ok := n.files[a[1]]
		if !ok {
			return fail("cat: " + a[1] + ": No such file or directory")
		}
		out.Write(data)
	case "readlink":
		data, ok := n.files[a[1]]
		if !ok {
			return fail("readlink: " + a[1] + ": No such file or directory")
		}
		fmt.Fprintln(out, string(data))
	case "mkdir":
	case "tee":
		var b bytes.Buffer
		if c.stdin != nil {
			io.Copy(&b, c.stdin)
		}
		n.files[a[1]] = b.Bytes()
		out.Write(b.Bytes())
	case "chmod":
		if _, ok := n.files[a[2]]; !ok {
			return fail("chmod: cannot access '" + a[2] + "'")
		}
		n.modes[a[2]] = a[1]
	case "mv":
		src, dst := a[len(a)-2], a[len(a)-1]
		n.files[dst], n.modes[dst] = n.files[src], n.modes[src]
		delete(n.files, src)
		delete(n.modes, src)
	default:
		if n.exit != nil {
			return n.exit
		}
		fmt.Fprintf(out, "ran %s\n", strings.Join(a, " "))
	}
	return nil
}

// fakeRuntime is kind without Docker: clusters are lists of fake nodes.
type fakeRuntime struct {
	mu        sync.Mutex
	clusters  map[string][]*fakeNode
	createErr error
	created   []*v1alpha4.Cluster
	deleted   []string
	// deletedKubeconfigs are the kubeconfig files Delete was given, in order.
	deletedKubeconfigs []string
	kubeconf           string
	// block, when set, is waited on by Create (an interrupt test closes it). A Delete of the cluster meanwhile
	// makes Create fail at once, as kind's next step on a removed node does.
	block chan struct{}
	gone  chan struct{}
	// cgroupVersion is the engine host's ("" answers 2).
	cgroupVersion string
	// images are the engine's images; loaded records LoadImages' calls as "node: ref ref".
	images map[string]bool
	loaded []string
	// sysctls are the settings Create gives a node, by its name.
	sysctls map[string]map[string]string
	// onCreate, when set, changes each node Create makes.
	onCreate func(*fakeNode)
	// late is how many Deletes are each followed by a node the engine finishes making afterwards (an
	// interrupted create's in-flight `docker run`).
	late int
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{clusters: map[string][]*fakeNode{}, kubeconf: "apiVersion: v1\nkind: Config\n"}
}

func (r *fakeRuntime) Create(name string, cfg *v1alpha4.Cluster, kubeconfig string, retain bool, wait time.Duration) error {
	if r.block != nil {
		r.mu.Lock()
		gone := make(chan struct{})
		r.gone = gone
		r.mu.Unlock()
		select {
		case <-r.block:
		case <-gone:
			// kind removes what it made (nothing left here) and returns its step's error.
			return fmt.Errorf("failed to init node with kubeadm: command \"docker exec --privileged %s-control-plane kubeadm init\" failed: No such container", name)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gone = nil
	r.created = append(r.created, cfg)
	var ns []*fakeNode
	workers := 0
	for i, n := range cfg.Nodes {
		nodeName := name + "-control-plane"
		if n.Role == v1alpha4.WorkerRole {
			workers++
			nodeName = name + "-worker"
			if workers > 1 {
				nodeName = fmt.Sprintf("%s-worker%d", name, workers)
			}
		}
		node := newFakeNode(nodeName, string(n.Role), fmt.Sprintf("172.18.0.%d", i+2))
		node.sysctls = r.sysctls[nodeName]
		if r.onCreate != nil {
			r.onCreate(node)
		}
		ns = append(ns, node)
	}
	r.clusters[name] = ns
	if r.createErr != nil && !retain {
		delete(r.clusters, name)
	}
	return r.createErr
}

func (r *fakeRuntime) Delete(name, kubeconfig string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deleted = append(r.deleted, name)
	r.deletedKubeconfigs = append(r.deletedKubeconfigs, kubeconfig)
	if r.gone != nil {
		close(r.gone)
		r.gone = nil
	}
	delete(r.clusters, name)
	if r.late > 0 {
		r.late--
		r.clusters[name] = []*fakeNode{newFakeNode(name+"-worker2", "worker", "172.18.0.4")}
	}
	return nil
}

func (r *fakeRuntime) List() ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for n := range r.clusters {
		out = append(out, n)
	}
	return out, nil
}

func (r *fakeRuntime) Nodes(name string) ([]nodes.Node, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []nodes.Node
	for _, n := range r.clusters[name] {
		out = append(out, n)
	}
	return out, nil
}

func (r *fakeRuntime) KubeConfig(string, []nodes.Node) (string, error) { return r.kubeconf, nil }
func (r *fakeRuntime) Gateway(context.Context) (string, error)         { return "172.18.0.1", nil }
func (r *fakeRuntime) CgroupVersion(context.Context) (string, error) {
	if r.cgroupVersion == "" {
		return "2", nil
	}
	return r.cgroupVersion, nil
}

func (r *fakeRuntime) HasImage(_ context.Context, ref string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.images[ref], nil
}

func (r *fakeRuntime) LoadImages(_ context.Context, ns []nodes.Node, refs []string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range ns {
		r.loaded = append(r.loaded, n.String()+": "+strings.Join(refs, " "))
	}
	return nil
}

// exitError is a real *exec.ExitError with the given code.
func exitError(code int) error {
	return exec.Command("sh", "-c", fmt.Sprintf("exit %d", code)).Run()
}

// runError is how kind's docker exec reports a command's failure: a RunError around os/exec's error.
func runError(inner error) error {
	return &kindexec.RunError{Command: []string{"docker", "exec"}, Inner: inner}
}
