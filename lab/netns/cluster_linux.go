package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/kubeconfig"
	"github.com/k8sguide/k8sguide/lab/nodecmd"
	"github.com/k8sguide/k8sguide/lab/state"
)

// clusterReadyTimeout bounds the wait for the control plane and the nodes at `up`: about 4 s here, but minutes
// under emulation (the IPVS test VM).
const clusterReadyTimeout = 5 * time.Minute

// KubeContext is the kubeconfig context (and cluster and user) of a netns lab, as kind names its kind-NAME.
func KubeContext(labName string) string { return "netns-" + labName }

// KubeconfigPath is the lab's own kubeconfig (admin.conf pointing at the host's loopback port), which k8sguide's
// commands use whatever the user's kubeconfig holds.
func (p *Provider) KubeconfigPath(labName string) string {
	return filepath.Join(p.Store.Dir(labName), "kubeconfig")
}

func (p *Provider) agentLog(labName, node string) string {
	return filepath.Join(p.Store.Dir(labName), "agent-"+node+".log")
}

// startControlPlane makes the lab's certificates, opens the apiserver's port on the host's loopback, starts every
// node's agent (the control-plane node's runs the control plane and forwards that port to it), writes the lab's
// kubeconfig and waits for the apiserver.
func (p *Provider) startControlPlane(ctx context.Context, h *state.Handle, st *state.Lab) error {
	name := st.Config.Name
	logPath := filepath.Join(p.Store.Dir(name), "pki.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	prog, err := p.labProgram()
	if err != nil {
		logf.Close()
		return err
	}
	argv := nodecmd.PKIArgv(prog, name)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	err = cmd.Run()
	logf.Close()
	if err != nil {
		return fmt.Errorf("writing the lab's certificates: %v (log: %s)", err, logPath)
	}

	// kind publishes the apiserver on a free loopback port of the host; so does this lab, without touching the
	// host's rules or routes: the socket is the host's, the agent holding it lives in the control-plane node.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("a loopback port for the apiserver: %w", err)
	}
	defer l.Close()
	sock, err := l.(*net.TCPListener).File()
	if err != nil {
		return err
	}
	defer sock.Close()
	st.APIServerPort = l.Addr().(*net.TCPAddr).Port
	st.InitPIDs = map[string]int{}
	if err := p.startAgent(h, st, st.Nodes[0], sock); err != nil {
		return err
	}
	if err := p.writeLabKubeconfig(st); err != nil {
		return err
	}
	client, err := p.clientset(name)
	if err != nil {
		return err
	}
	return p.waitCluster(ctx, st, "the apiserver", func(ctx context.Context) (bool, error) {
		_, err := client.Discovery().ServerVersion()
		return err == nil, nil
	})
}

func (p *Provider) initLog(labName, node string) string {
	return filepath.Join(p.Store.Dir(labName), "init-"+node+".log")
}

// startAgent starts a node's init, which starts the node's agent (and starts it again whenever it dies), and
// records the init's pid.
func (p *Provider) startAgent(h *state.Handle, st *state.Lab, n lab.Node, apiListener *os.File) error {
	var extra []*os.File
	if apiListener != nil {
		extra = []*os.File{apiListener}
	}
	cgroup := ""
	if st.Cgroup != "" {
		cgroup = nodeCgroup(st.Cgroup, n.Name)
	}
	prog, err := p.labProgram()
	if err != nil {
		return err
	}
	pid, err := startDetached(n.Name, p.initLog(st.Config.Name, n.Name), cgroup, nodecmd.NodeInitArgv(prog, st.Config.Name, n.Name, apiListener != nil), extra...)
	if err != nil {
		return err
	}
	st.InitPIDs[n.Name] = pid
	return h.Save(st)
}

// joinNodes starts the workers' agents, waits until every node is registered and has a pod CIDR from the
// controller-manager's node-IPAM (recorded in the lab's state), and until the default namespace has its
// ServiceAccount (pods are refused until it has). Nodes join one after the other, as kind's workers join after
// its control plane, so that CIDRs usually follow the nodes' order (the control-plane node 10.244.0.0/24, the
// first worker 10.244.1.0/24, ...); the controller sometimes skips one, and the lab wires what it gave.
func (p *Provider) joinNodes(ctx context.Context, h *state.Handle, st *state.Lab) error {
	client, err := p.clientset(st.Config.Name)
	if err != nil {
		return err
	}
	for i, n := range st.Nodes {
		if i > 0 {
			if err := p.startAgent(h, st, n, nil); err != nil {
				return err
			}
		}
		var got *v1.Node
		if err := p.waitCluster(ctx, st, "node "+n.Name, func(ctx context.Context) (bool, error) {
			got, err = client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			return err == nil && got.Spec.PodCIDR != "", nil
		}); err != nil {
			return err
		}
		st.Nodes[i].PodCIDR = got.Spec.PodCIDR
	}
	if err := h.Save(st); err != nil {
		return err
	}
	return p.waitCluster(ctx, st, "the default ServiceAccount", func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

// waitCluster polls cond until it holds, failing at once, with the agent's log named, when an agent has stopped
// (its init would start it again, but a lab whose agent fails while it is made is not one to hand over).
func (p *Provider) waitCluster(ctx context.Context, st *state.Lab, what string, cond wait.ConditionWithContextFunc) error {
	ctx, cancel := context.WithTimeout(ctx, clusterReadyTimeout)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if d := diskProblem(p.Store.Dir(st.Config.Name)); d != "" {
			return false, errors.New(d)
		}
		if s, ok := ReadProcStatus(ControlPlaneRecord(p.Store, st.Config.Name)); ok && s.Restarts > 0 {
			log := filepath.Join(p.Store.Dir(st.Config.Name), "control-plane.log")
			return false, fmt.Errorf("the control plane stopped (%s): %s (log: %s)", s.LastExit, s.LastLog, log)
		}
		for node, pid := range st.InitPIDs {
			if !processAlive(pid) {
				return false, fmt.Errorf("the init of node %s stopped: %s (log: %s)", node, LastLogLine(p.initLog(st.Config.Name, node)), p.initLog(st.Config.Name, node))
			}
			if s, ok := readInitStatus(p.Store, st.Config.Name, node); ok && s.Restarts > 0 {
				return false, fmt.Errorf("the agent of node %s stopped (%s): %s (log: %s)", node, s.LastExit, LastLogLine(p.agentLog(st.Config.Name, node)), p.agentLog(st.Config.Name, node))
			}
		}
		return cond(ctx)
	})
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("waiting for %s: not ready after %s (logs: %s)", what, clusterReadyTimeout, p.Store.Dir(st.Config.Name))
	}
	return err
}

// LastLogLine is the last line of a log: a stopped process's reason, in one line.
func LastLogLine(path string) string {
	return strings.TrimSpace(tail(path, 1))
}

// writeLabKubeconfig writes the lab's kubeconfig: kubeadm's admin.conf, pointing at the host's port.
func (p *Provider) writeLabKubeconfig(st *state.Lab) error {
	cfg, err := clientcmd.LoadFromFile(ControlPlaneConfig(p.Store, st.Config, st.Nodes).AdminKubeconfig())
	if err != nil {
		return err
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://127.0.0.1:" + strconv.Itoa(st.APIServerPort)
	}
	return clientcmd.WriteToFile(*cfg, p.KubeconfigPath(st.Config.Name))
}

// writeUserKubeconfig adds the lab's context to the user's kubeconfig, by kind's rules.
func (p *Provider) writeUserKubeconfig(st *state.Lab) error {
	cfg, err := clientcmd.LoadFromFile(p.KubeconfigPath(st.Config.Name))
	if err != nil {
		return err
	}
	if err := kubeconfig.Merge(st.Config.Kubeconfig, KubeContext(st.Config.Name), cfg); err != nil {
		return fmt.Errorf("writing context %s to %s: %w", KubeContext(st.Config.Name), st.Config.Kubeconfig, err)
	}
	return nil
}

// clientset is an API client of the lab, from the host.
func (p *Provider) clientset(labName string) (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", p.KubeconfigPath(labName))
	if err != nil {
		return nil, fmt.Errorf("lab %s: %w", labName, err)
	}
	// Long enough to wait out a control plane that restarts (the agent's port forward holds a request until
	// the apiserver is ready again, at most readinessWait).
	cfg.Timeout = 30 * time.Second
	// client-go's default of 5 requests a second would make a deploy of 1,000 Services (one server-side apply
	// each) take over three minutes. The lab's apiserver serves this client alone, on this machine.
	cfg.QPS, cfg.Burst = 500, 1000
	// A request the apiserver did not answer says why, from what the lab's nodes report.
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &diagnosingTransport{p: p, lab: labName, next: rt}
	})
	return kubernetes.NewForConfig(cfg)
}

// Kubeconfig is the lab's own kubeconfig.
func (p *Provider) Kubeconfig(ctx context.Context, name string) ([]byte, error) {
	if _, err := p.Store.View(name); err != nil {
		return nil, err
	}
	return os.ReadFile(p.KubeconfigPath(name))
}
