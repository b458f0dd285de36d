package kind

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/kubectl/pkg/util/podutils"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"
	kindexec "sigs.k8s.io/kind/pkg/exec"
	"sigs.k8s.io/yaml"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/engines"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/kubeconfig"
	"github.com/k8sguide/k8sguide/lab/podserver"
	"github.com/k8sguide/k8sguide/lab/workload"
)

// ProviderName is the name of this provider.
const ProviderName = "kind"

// CiliumInstaller readies Cilium's chart for src before the cluster is made, so that a registry that does not
// answer costs no cluster, and returns what installs it into the fresh cluster and waits for its agents
// (dataplanes/ebpf/chart). The install is handed src again: the nodes have by then told what they cannot grant.
type CiliumInstaller func(ctx context.Context, src CiliumSource, progress io.Writer) (CiliumInstall, error)

// CiliumInstall installs Cilium from src into the cluster of kubeconfigPath and waits for its agents.
type CiliumInstall func(ctx context.Context, kubeconfigPath string, cfg lab.Config, src CiliumSource, progress io.Writer) error

// Provider builds labs as kind clusters.
type Provider struct {
	Runtime Runtime
	// Cilium installs the ebpf dataplane once the cluster is up.
	Cilium CiliumInstaller
	// Clientset makes the API client from a kubeconfig; tests replace it with a fake.
	Clientset func(kubeconfig []byte) (kubernetes.Interface, error)
	// Tools copies a k8sguide that runs on the node into it (see tool.go).
	Tools *Tools
	// WaitForReady is how long kind waits for the nodes to be Ready.
	WaitForReady time.Duration
	// Engine says whether a container engine answers (EngineAnswers).
	Engine func(ctx context.Context) error
	// Settle is how long the engine must list none of a failed cluster's nodes before Create returns (zero:
	// settleFor); tests shorten it.
	Settle time.Duration

	mu      sync.Mutex
	clients map[string]kubernetes.Interface
	// found is each cluster's nodes as find listed them, once per command: a listing is two docker calls and a
	// node inspect, and a command finds its lab many times. Create and Delete forget them.
	found map[string][]nodes.Node
	// listed is the engine's clusters as List last read them: finding the lab a command was given lists them
	// (providers.ForLab), and find need not ask again. A cluster it does not name is asked for again.
	listed []string
	// gatewayIP is what gateway read.
	gatewayIP string
}

// New returns the provider on Docker.
func New(cilium CiliumInstaller) (*Provider, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return &Provider{
		Runtime:      NewDockerRuntime(),
		Cilium:       cilium,
		Clientset:    clientsetFromKubeconfig,
		Tools:        NewTools(exe),
		WaitForReady: 3 * time.Minute,
		Engine:       EngineAnswers,
	}, nil
}

var _ lab.Provider = (*Provider)(nil)

func (p *Provider) Name() string { return ProviderName }

func clientsetFromKubeconfig(kubeconfig []byte) (kubernetes.Interface, error) {
	rc, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	rc.QPS, rc.Burst = 50, 100
	return kubernetes.NewForConfig(rc)
}

// Validate checks everything `up` is given before anything is made, and fills defaults.
func Validate(cfg *lab.Config) error {
	// Each node is a container with its own kubelet and containerd: a laptop holds a handful.
	return cfg.Validate(20)
}

// Create builds the kind cluster. Anything that fails after kind made the nodes (Cilium not ready, an interrupt)
// deletes the cluster again, unless cfg.Retain.
func (p *Provider) Create(ctx context.Context, cfg lab.Config, progress io.Writer) (err error) {
	if err := Validate(&cfg); err != nil {
		return err
	}
	p.forget(cfg.Name)
	defer p.forget(cfg.Name)
	image, _, warning, err := NodeImage(cfg.Image, cfg.KubernetesVersion)
	if err != nil {
		return err
	}
	kc, err := ClusterConfig(cfg, image)
	if err != nil {
		return err
	}
	if err := p.Engine(ctx); err != nil {
		return fmt.Errorf("the kind provider needs a Docker engine: %v; use --provider netns for a lab without Docker", err)
	}
	existing, err := p.Runtime.List()
	if err != nil {
		return fmt.Errorf("listing kind clusters: %w", err)
	}
	if slices.Contains(existing, cfg.Name) {
		return fmt.Errorf("a kind cluster named %q already exists: remove it (k8sguide down --name %s) or pick another --name", cfg.Name, cfg.Name)
	}
	if warning != "" {
		fmt.Fprintf(progress, "Note: %s\n", warning)
	}
	var cilium CiliumSource
	var installCilium CiliumInstall
	if lab.RunsCilium(cfg.Dataplane) {
		if p.Cilium == nil {
			return errors.New("this build cannot install Cilium")
		}
		if cilium, err = FindCiliumSource(ctx, p.Runtime); err != nil {
			return err
		}
		if installCilium, err = p.Cilium(ctx, cilium, progress); err != nil {
			return err
		}
	}
	if v, err := p.Runtime.CgroupVersion(ctx); err == nil && v == "1" {
		kc.KubeadmConfigPatches = append(kc.KubeadmConfigPatches, CgroupV1Patch)
		fmt.Fprintln(progress, "Note: this Docker engine's host uses cgroup v1, which kubelet refuses from Kubernetes 1.35")
		fmt.Fprintln(progress, "      unless told otherwise: the nodes' kubelets run with failCgroupV1: false.")
	}
	fmt.Fprintf(progress, "Creating lab %q (provider kind, dataplane %s, %s) ...\n", cfg.Name, cfg.Dataplane, image)
	if lab.RunsCilium(cfg.Dataplane) {
		fmt.Fprintf(progress, "Dataplane: %s\n", cilium)
	}
	wait := p.WaitForReady
	if lab.RunsCilium(cfg.Dataplane) {
		// Without a CNI the nodes stay NotReady until Cilium runs: wait for Cilium instead.
		wait = 0
	}
	kcPath := kubeconfig.Path(cfg.Kubeconfig)
	created := make(chan error, 1)
	go func() { created <- p.Runtime.Create(cfg.Name, kc, cfg.Kubeconfig, cfg.Retain, wait) }()
	select {
	case err = <-created:
	case <-ctx.Done():
		if cfg.Retain {
			// kind cannot be stopped halfway: let it finish, and keep what it made.
			fmt.Fprintf(progress, "Interrupted: stopping once kind returns (--retain: cluster %q is kept) ...\n", cfg.Name)
			<-created
		} else {
			fmt.Fprintf(progress, "Interrupted: removing cluster %q ...\n", cfg.Name)
			p.deleteUnder(cfg.Name, cfg.Kubeconfig, created)
		}
		err = ctx.Err()
	}
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			err = createError(err, image)
		}
		if !cfg.Retain {
			// kind removes its nodes when it fails itself; this covers the interrupt, and the engine's late work.
			p.removeFailed(cfg.Name, cfg.Kubeconfig)
		}
		return err
	}
	defer func() {
		if err != nil {
			if cfg.Retain {
				fmt.Fprintf(progress, "Keeping cluster %q (--retain); remove it with k8sguide down --name %s\n", cfg.Name, cfg.Name)
				return
			}
			p.Runtime.Delete(cfg.Name, cfg.Kubeconfig)
		}
	}()
	// The cluster's Kubernetes nodes, read once for what follows (kind's external load balancer of an HA control
	// plane is not one).
	all, err := p.Runtime.Nodes(cfg.Name)
	if err != nil {
		return err
	}
	ns, err := nodeutils.InternalNodes(all)
	if err != nil {
		return err
	}
	if err = ensureForwarding(ctx, ns, progress); err != nil {
		return err
	}
	if lab.RunsCilium(cfg.Dataplane) {
		// Helm reads a kubeconfig file: give it the cluster's own, whatever the user's file holds.
		f, ferr := os.CreateTemp("", "k8sguide-kubeconfig-*")
		if ferr != nil {
			return ferr
		}
		defer os.Remove(f.Name())
		data, kerr := p.Runtime.KubeConfig(cfg.Name, all)
		if kerr != nil {
			f.Close()
			return kerr
		}
		if _, err = f.WriteString(data); err != nil {
			f.Close()
			return err
		}
		f.Close()
		if err = p.prepareCilium(ctx, ns, &cilium, progress); err != nil {
			return err
		}
		if err = installCilium(ctx, f.Name(), cfg, cilium, progress); err != nil {
			return err
		}
	}
	if err = p.waitSchedulable(ctx, cfg.Name, ns, cfg.Dataplane, progress); err != nil {
		return err
	}
	if err = recordKubeconfig(ctx, ns, cfg.Kubeconfig); err != nil {
		return err
	}
	fmt.Fprintf(progress, "Lab %q is ready.\nKubeconfig: %s (context kind-%s)\nNodes:\n", cfg.Name, kcPath, cfg.Name)
	st, err := p.Status(ctx, cfg.Name)
	if err != nil {
		return err
	}
	for _, n := range st.Nodes {
		fmt.Fprintf(progress, "  %-28s %-14s %s\n", n.Name, n.Role, n.IP)
	}
	fmt.Fprintf(progress, "Next: k8sguide deploy --name %s && k8sguide nodeport --name %s\n", cfg.Name, cfg.Name)
	lab.PrintGuideAliases(progress, cfg)
	return nil
}

// ensureForwarding turns IPv4 forwarding on in every node where it is off. A node is a network namespace that
// starts with the Docker host's own net.ipv4.ip_forward; Docker's engine sets it on the host, but an engine run
// without (--ip-forward=false, as this project's test engine) or another runtime may not, and kind runs kubeadm
// past its preflight check of it. A node that does not forward drops what kube-proxy DNATs to a pod on another
// node: a NodePort on a node with no pod of its Service answers nothing. The CNI plugins turn forwarding on
// when they wire a pod, so it shows only on a node that has run none (found on 3-node labs: kindnet's plugin
// did not, and the worker without a web pod dropped every NodePort connection).
func ensureForwarding(ctx context.Context, ns []nodes.Node, progress io.Writer) error {
	var turned []string
	for _, n := range ns {
		v, err := output(ctx, n, nil, "sysctl", "-n", "net.ipv4.ip_forward")
		if err != nil {
			return fmt.Errorf("node %s: reading net.ipv4.ip_forward: %w", n, err)
		}
		if strings.TrimSpace(v) == "1" {
			continue
		}
		if _, err := output(ctx, n, nil, "sysctl", "-w", "net.ipv4.ip_forward=1"); err != nil {
			return fmt.Errorf("node %s: turning IPv4 forwarding on: %w", n, err)
		}
		turned = append(turned, n.String())
	}
	if len(turned) > 0 {
		slices.SortFunc(turned, compareNodeNames)
		// The node list on a line of its own: the note fits a 100-column terminal for the default 3 nodes.
		fmt.Fprintf(progress, "Note: IPv4 forwarding was off in %s\n"+
			"      (the Docker host's net.ipv4.ip_forward): turned on, as Kubernetes nodes need it.\n", strings.Join(turned, ", "))
	}
	return nil
}

// waitSchedulable waits until every node is Ready, without the not-ready taint, and runs a ready proxy pod.
// kind waits for its control-plane node only, and the workers join a few seconds later: a deploy right after
// kind returned put every pod on the first worker that was Ready (found on 3-node labs: both replicas of the
// local-traffic lesson on one worker, so the other, with no local endpoint, dropped its NodePort, as
// externalTrafficPolicy Local says). A lab is ready when a Deployment spreads over all of its workers.
func (p *Provider) waitSchedulable(ctx context.Context, name string, ns []nodes.Node, d dataplanes.Name, progress io.Writer) error {
	cs, err := p.clientset(name)
	if err != nil {
		return err
	}
	timeout := p.WaitForReady
	if timeout <= 0 {
		timeout = 3 * time.Minute
	}
	var want []string
	for _, n := range ns {
		want = append(want, n.String())
	}
	slices.SortFunc(want, compareNodeNames)
	var waiting []string
	said := false
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		why, lerr := p.notSchedulable(ctx, cs, want, d)
		if lerr != nil {
			// An apiserver that just started may refuse a moment: asked again until the time is up.
			why = []string{"reading its nodes from the apiserver: " + lerr.Error()}
		}
		waiting = why
		if len(waiting) > 0 && !said {
			fmt.Fprintf(progress, "Waiting ≤ %s for every node and its proxy to be Ready ...\n", timeout)
			said = true
		}
		return len(waiting) == 0, nil
	})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return fmt.Errorf("lab %s: not ready after %s: %s", name, timeout, strings.Join(waiting, "; "))
}

// notSchedulable says, for each node of want that cannot take pods yet or runs no ready proxy, why.
func (p *Provider) notSchedulable(ctx context.Context, cs kubernetes.Interface, want []string, d dataplanes.Name) ([]string, error) {
	knodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	proxies, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: proxySelector(d)})
	if err != nil {
		return nil, err
	}
	ready := map[string]bool{}
	for _, pod := range proxies.Items {
		if podutils.IsPodReady(&pod) {
			ready[pod.Spec.NodeName] = true
		}
	}
	byName := map[string]*v1.Node{}
	for i := range knodes.Items {
		byName[knodes.Items[i].Name] = &knodes.Items[i]
	}
	var why []string
	for _, n := range want {
		kn := byName[n]
		switch {
		case kn == nil:
			why = append(why, n+" has not joined")
		case !nodeReady(kn):
			why = append(why, n+" is not Ready")
		case slices.ContainsFunc(kn.Spec.Taints, func(t v1.Taint) bool { return t.Key == v1.TaintNodeNotReady }):
			why = append(why, n+" still has the "+v1.TaintNodeNotReady+" taint")
		case !ready[n]:
			why = append(why, n+" runs no ready "+proxyApp(d)+" pod")
		}
	}
	return why, nil
}

func nodeReady(n *v1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// createError turns kind's failures into one line that says what to do.
func createError(err error, image string) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "failed to pull image"):
		return fmt.Errorf("could not pull the kind node image %s: check that this host reaches its registry (docker pull %s)", image, image)
	case strings.Contains(msg, "already exist"):
		return fmt.Errorf("kind: %s", lab.FirstLine(msg))
	}
	var re *kindexec.RunError
	if errors.As(err, &re) {
		if out := lastLine(string(re.Output)); out != "" {
			return fmt.Errorf("kind: %s: %s", lab.FirstLine(msg), out)
		}
	}
	return fmt.Errorf("kind: %s", lab.FirstLine(msg))
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// kubeconfigRecord is the file, in the control-plane node, that holds the kubeconfig `up --kubeconfig` wrote the
// lab's context to, so that `down` removes it there (kind delete cluster would need the flag again).
const kubeconfigRecord = "/kind/k8sguide-kubeconfig"

func recordKubeconfig(ctx context.Context, ns []nodes.Node, kubeconfig string) error {
	if kubeconfig == "" {
		return nil // kind's rules at down time: $KUBECONFIG, else ~/.kube/config, as at up
	}
	path, err := filepath.Abs(kubeconfig)
	if err != nil {
		return err
	}
	cp, err := nodeutils.BootstrapControlPlaneNode(ns)
	if err != nil {
		return err
	}
	if _, err := output(ctx, cp, strings.NewReader(path), "tee", kubeconfigRecord); err != nil {
		return fmt.Errorf("node %s: recording the kubeconfig: %w", cp, err)
	}
	return nil
}

// Delete removes the cluster and its kubeconfig context, from the file up wrote it to.
func (p *Provider) Delete(ctx context.Context, name string) error {
	ns, err := p.find(name)
	if err != nil {
		return err
	}
	defer p.forget(name)
	kubeconfig := ""
	if cp, err := nodeutils.BootstrapControlPlaneNode(ns); err == nil {
		// A stopped node cannot say: then kind's rules, as for a lab made without --kubeconfig.
		if out, err := output(ctx, cp, nil, "cat", kubeconfigRecord); err == nil {
			kubeconfig = strings.TrimSpace(out)
		}
	}
	return p.Runtime.Delete(name, kubeconfig)
}

func (p *Provider) List(ctx context.Context) ([]string, error) {
	clusters, err := p.Runtime.List()
	if err == nil {
		p.mu.Lock()
		p.listed = clusters
		p.mu.Unlock()
	}
	return clusters, err
}

// find returns the cluster's nodes, or a NotFoundError.
func (p *Provider) find(name string) ([]nodes.Node, error) {
	p.mu.Lock()
	ns, ok := p.found[name]
	p.mu.Unlock()
	if ok {
		return ns, nil
	}
	p.mu.Lock()
	clusters := p.listed
	p.mu.Unlock()
	var err error
	if !slices.Contains(clusters, name) {
		if clusters, err = p.List(context.Background()); err != nil {
			return nil, err
		}
	}
	if !slices.Contains(clusters, name) {
		return nil, &lab.NotFoundError{Kind: "lab", Name: name, Known: clusters}
	}
	if ns, err = p.Runtime.Nodes(name); err != nil || len(ns) == 0 {
		return ns, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.found == nil {
		p.found = map[string][]nodes.Node{}
	}
	p.found[name] = ns
	return ns, nil
}

// gateway is the runtime's Gateway, asked once per command (a docker network inspect; commands read the lab's
// status more than once).
func (p *Provider) gateway(ctx context.Context) (string, error) {
	p.mu.Lock()
	gw := p.gatewayIP
	p.mu.Unlock()
	if gw != "" {
		return gw, nil
	}
	gw, err := p.Runtime.Gateway(ctx)
	if err == nil {
		p.mu.Lock()
		p.gatewayIP = gw
		p.mu.Unlock()
	}
	return gw, err
}

// forget drops what find listed of cluster name: it is being made or removed.
func (p *Provider) forget(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.found, name)
	p.listed = nil
}

// Status reads the nodes from kind (names, roles, addresses), the dataplane from the nodes' label, and each
// node's proxy (kube-proxy or the Cilium agent) from its pod.
func (p *Provider) Status(ctx context.Context, name string) (lab.Status, error) {
	ns, err := p.find(name)
	if err != nil {
		return lab.Status{}, err
	}
	st := lab.Status{Name: name, Provider: ProviderName, Proxies: map[string]lab.ProxyStatus{}}
	for _, n := range ns {
		role, err := n.Role()
		if err != nil {
			return lab.Status{}, err
		}
		if role != string(lab.ControlPlane) && role != string(lab.Worker) {
			continue // kind's external load balancer of an HA control plane
		}
		ip, _, err := n.IP()
		if err != nil {
			return lab.Status{}, err
		}
		st.Nodes = append(st.Nodes, lab.Node{Name: n.String(), Role: lab.Role(role), IP: ip})
	}
	slices.SortFunc(st.Nodes, func(a, b lab.Node) int { return compareNodeNames(a.Name, b.Name) })
	if st.Client, err = p.gateway(ctx); err != nil {
		return lab.Status{}, err
	}
	cs, err := p.clientset(name)
	if err != nil {
		return lab.Status{}, err
	}
	knodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return lab.Status{}, fmt.Errorf("lab %s: reading its nodes from the apiserver: %w", name, err)
	}
	for _, kn := range knodes.Items {
		if d := kn.Labels[DataplaneLabel]; d != "" {
			st.Dataplane = dataplanes.Name(d)
		}
		for i := range st.Nodes {
			if st.Nodes[i].Name == kn.Name {
				st.Nodes[i].PodCIDR = kn.Spec.PodCIDR
			}
		}
	}
	proxies, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: proxySelector(st.Dataplane)})
	if err != nil {
		return lab.Status{}, err
	}
	for _, pod := range proxies.Items {
		st.Proxies[pod.Spec.NodeName] = lab.ProxyStatus{Running: podutils.IsPodReady(&pod)}
	}
	return st, nil
}

var _ lab.ShapeReader = (*Provider)(nil)

// ReadShape reads back from the cluster what up asked of it beyond the dataplane (lab.ShapeReader): the
// apiserver's NodePort range (its static pod's command, as kubeadm writes it), kube-proxy's --nodeport-addresses
// (its ConfigMap) and Cilium's load-balancing algorithm (cilium-config). What cannot be read stays unknown.
func (p *Provider) ReadShape(ctx context.Context, name string, st *lab.Status) error {
	cs, err := p.clientset(name)
	if err != nil {
		return err
	}
	apiservers, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "component=kube-apiserver"})
	if err == nil && len(apiservers.Items) > 0 {
		st.NodePortRange = lab.DefaultNodePortRange
		for _, c := range apiservers.Items[0].Spec.Containers {
			for _, arg := range c.Command {
				if r, ok := strings.CutPrefix(arg, "--service-node-port-range="); ok {
					st.NodePortRange = r
				}
			}
		}
	}
	face, _ := engines.Lab(st.Dataplane)
	if face.Agent == dataplanes.AgentCilium {
		if cm, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "cilium-config", metav1.GetOptions{}); err == nil {
			if st.LBAlgorithm = cm.Data["bpf-lb-algorithm"]; st.LBAlgorithm == "" {
				st.LBAlgorithm = face.LBAlgorithms[0] // Cilium's default, as up's
			}
		}
		return nil
	}
	if cm, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{}); err == nil {
		var conf struct {
			NodePortAddresses []string `json:"nodePortAddresses"`
		}
		if yaml.Unmarshal([]byte(cm.Data["config.conf"]), &conf) == nil {
			st.NodePortAddresses = conf.NodePortAddresses
		}
	}
	return nil
}

// proxySelector selects the pods that implement Services on each node.
func proxySelector(d dataplanes.Name) string { return "k8s-app=" + proxyApp(d) }

// proxyApp is the k8s-app label of the pods that implement Services on each node.
func proxyApp(d dataplanes.Name) string {
	if lab.RunsCilium(d) {
		return "cilium"
	}
	return "kube-proxy"
}

// compareNodeNames orders nodes as kind names them: control-plane, worker, worker2, ..., worker10.
func compareNodeNames(a, b string) int {
	if len(a) != len(b) {
		ca, cb := strings.HasSuffix(a, "-control-plane"), strings.HasSuffix(b, "-control-plane")
		switch {
		case ca && !cb:
			return -1
		case cb && !ca:
			return 1
		}
		return len(a) - len(b)
	}
	return strings.Compare(a, b)
}

// Workloads gives the cluster's objects through client-go; a rollout may wait minutes for image pulls.
func (p *Provider) Workloads(ctx context.Context, name string) (lab.Workloads, error) {
	if _, err := p.find(name); err != nil {
		return nil, err
	}
	cs, err := p.clientset(name)
	if err != nil {
		return nil, err
	}
	return workload.Client(cs, 3*time.Minute, time.Second), nil
}

// clientset is the cluster's API client, made once per command: reading the kubeconfig is a docker exec into the
// control plane, and trace asks for the client several times (status, names).
func (p *Provider) clientset(name string) (kubernetes.Interface, error) {
	p.mu.Lock()
	cs, ok := p.clients[name]
	p.mu.Unlock()
	if ok {
		return cs, nil
	}
	ns, err := p.find(name)
	if err != nil {
		return nil, err
	}
	kc, err := p.Runtime.KubeConfig(name, ns)
	if err != nil {
		return nil, fmt.Errorf("lab %s: kubeconfig: %w", name, err)
	}
	if cs, err = p.Clientset([]byte(kc)); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if made, ok := p.clients[name]; ok {
		return made, nil // another goroutine of this command made one meanwhile
	}
	if p.clients == nil {
		p.clients = map[string]kubernetes.Interface{}
	}
	p.clients[name] = cs
	return cs, nil
}

// node finds one of the cluster's nodes by its name or its short name (worker2: lab.ResolveNode).
func (p *Provider) node(name, target string) (nodes.Node, error) {
	ns, err := p.find(name)
	if err != nil {
		return nil, err
	}
	var known []string
	for _, n := range ns {
		known = append(known, n.String())
	}
	// The client is in the list the user sees, as exec takes it; it is no node.
	known = append(known, lab.ClientName(name))
	full, err := lab.ResolveNode(known, name, target)
	if err != nil {
		return nil, err
	}
	for _, n := range ns {
		if n.String() == full {
			return n, nil
		}
	}
	return nil, &lab.NotFoundError{Kind: "node", Name: target, Known: known}
}

// isClient says whether target names the lab's client: LAB-client, or client for short.
func isClient(name, target string) bool { return target == lab.ClientName(name) || target == "client" }

// Exec runs argv in a node through kind's node API (docker exec), or on this host for the lab's client: on
// kind the host is the client, as in the seeds. A command's exit status comes back as an *exec.ExitError.
func (p *Provider) Exec(ctx context.Context, name, target string, argv []string, streams lab.Streams) error {
	if len(argv) == 0 {
		return errors.New("no command given: k8sguide exec NODE -- COMMAND [ARG...]")
	}
	if isClient(name, target) {
		if _, err := p.find(name); err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = streams.In, streams.Out, streams.Err
		return cmd.Run()
	}
	n, container, err := p.nodeOrPod(ctx, name, target)
	if err != nil {
		return err
	}
	if container != "" {
		enter, err := enterPod(ctx, n, container)
		if err != nil {
			return fmt.Errorf("pod %s: %w", strings.TrimPrefix(target, "pod/"), err)
		}
		argv = append(enter, argv...)
	}
	cmd := n.CommandContext(ctx, argv[0], argv[1:]...)
	if streams.In != nil {
		cmd.SetStdin(streams.In)
	}
	if streams.Out != nil {
		cmd.SetStdout(streams.Out)
	}
	if streams.Err != nil {
		cmd.SetStderr(streams.Err)
	}
	err = cmd.Run()
	var re *kindexec.RunError
	if errors.As(err, &re) && re.Inner != nil {
		// kind wraps the docker exec's exit; hand back the exit itself so `k8sguide exec` exits with its code.
		return re.Inner
	}
	return err
}

// ToolPath is a k8sguide binary that runs in the node (copied in on first use), or this one for the client.
func (p *Provider) ToolPath(ctx context.Context, name, target string) (string, error) {
	if isClient(name, target) {
		return p.Tools.Host, nil
	}
	n, _, err := p.nodeOrPod(ctx, name, target)
	if err != nil {
		return "", err
	}
	return p.Tools.Ensure(ctx, n)
}

// nodeOrPod finds target among the lab's nodes, else among its pods (any namespace's, or as pod/NAME or
// pod/NAMESPACE/NAME, which skips the nodes): then n is the pod's node and container its running container's ID. On kind a pod is a container that the node's containerd runs inside the node's
// own container, so a command runs in a pod as a command in its node entered into the pod's network namespace
// (enterPod).
func (p *Provider) nodeOrPod(ctx context.Context, name, target string) (n nodes.Node, container string, err error) {
	podNS, podName, isPod := lab.PodRef(target)
	notFound := &lab.NotFoundError{Kind: "pod", Name: target}
	if isPod {
		if _, err := p.find(name); err != nil {
			return nil, "", err
		}
	} else {
		n, err = p.node(name, target)
		if !errors.As(err, &notFound) || notFound.Kind != "node" {
			return n, "", err
		}
		notFound.Kind, podName = "node or pod", target
	}
	cs, err := p.clientset(name)
	if err != nil {
		return nil, "", err
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, "", fmt.Errorf("lab %s: pods: %w", name, err)
	}
	i := slices.IndexFunc(pods.Items, func(pod v1.Pod) bool {
		return pod.Name == podName && (podNS == "" || pod.Namespace == podNS)
	})
	if i < 0 {
		return nil, "", notFound
	}
	pod := &pods.Items[i]
	id := ""
	if len(pod.Status.ContainerStatuses) > 0 && pod.Status.ContainerStatuses[0].State.Running != nil {
		id = pod.Status.ContainerStatuses[0].ContainerID
	}
	id, ok := strings.CutPrefix(id, "containerd://")
	if !ok || pod.Spec.NodeName == "" {
		return nil, "", fmt.Errorf("pod %s is not running (phase %s)", podName, pod.Status.Phase)
	}
	if pod.Spec.HostNetwork {
		return nil, "", fmt.Errorf("pod %s uses its node's network: run on node %s", podName, pod.Spec.NodeName)
	}
	if n, err = p.node(name, pod.Spec.NodeName); err != nil {
		return nil, "", err
	}
	return n, id, nil
}

// enterPod is the argv prefix that runs a command in node n inside the network namespace of its container
// (nsenter, through the container's pid as crictl gives it; the node image has both). Only the network
// namespace: the pod's filesystem need not hold the command, which is k8sguide itself for connect and trace
// --verify, as in the netns lab's pods.
func enterPod(ctx context.Context, n nodes.Node, container string) ([]string, error) {
	pid, err := output(ctx, n, nil, "crictl", "inspect", "--output", "go-template", "--template", "{{.info.pid}}", container)
	if err != nil {
		return nil, fmt.Errorf("container %s's process in %s: %w", container, n, err)
	}
	pid = strings.TrimSpace(pid)
	if _, err := strconv.Atoi(pid); err != nil || pid == "0" {
		return nil, fmt.Errorf("crictl gave no process for container %s in %s (%q)", container, n, pid)
	}
	return []string{"nsenter", "--net=/proc/" + pid + "/ns/net", "--"}, nil
}

// Get makes one HTTP request from this host (the lab's client) to addr and says which pod answered.
func (p *Provider) Get(ctx context.Context, name, addr string) (lab.Reply, error) {
	if _, err := p.find(name); err != nil {
		return lab.Reply{}, err
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return lab.Reply{}, fmt.Errorf("address %q: want IP:PORT", addr)
	}
	pod, client, err := podserver.Get(ctx, addr, 0)
	if err != nil {
		return lab.Reply{}, err
	}
	return lab.Reply{Pod: pod, Client: client}, nil
}

// Kubeconfig is the cluster's kubeconfig for use from this host, as `kind get kubeconfig` prints it.
func (p *Provider) Kubeconfig(ctx context.Context, name string) ([]byte, error) {
	ns, err := p.find(name)
	if err != nil {
		return nil, err
	}
	kc, err := p.Runtime.KubeConfig(name, ns)
	if err != nil {
		return nil, fmt.Errorf("lab %s: kubeconfig: %w", name, err)
	}
	return []byte(kc), nil
}

// The engine must list none of a failed cluster's nodes for settleFor, and is given settleMax in all.
const (
	settleFor  = 3 * time.Second
	settleMax  = time.Minute
	settlePoll = 250 * time.Millisecond
)

// deleteUnder removes cluster name's nodes while kind is still making it, again every deleteUnderEvery until
// kind returns (created): the engine may still be starting a node. kind cannot be stopped halfway, but its next
// step on a node that is gone fails (the wait for the node's systemd, a docker exec) and kind then returns: an
// interrupted up ends in seconds (6–12 s here), not once kind has made the whole cluster (45 s here, minutes on a
// slow Docker Desktop).
func (p *Provider) deleteUnder(name, kubeconfig string, created <-chan error) {
	for {
		p.Runtime.Delete(name, kubeconfig)
		select {
		case <-created:
			return
		case <-time.After(deleteUnderEvery):
		}
	}
}

// deleteUnderEvery: not more often, as the engine lists a node it is still removing (each Delete prints kind's
// "Deleted nodes" line: every second, that was five lines for one interrupt).
const deleteUnderEvery = 3 * time.Second

// removeFailed removes the nodes of a cluster whose creation failed or was interrupted, until the engine lists none
// for a while. kind's create returns at the first node whose `docker run` fails (an interrupt kills the docker
// clients), and the engine may still finish requests it had taken: in CI here, an interrupted up left all three
// node containers and their volumes after kind's clean-up and ours had each said "Deleted nodes" for them.
func (p *Provider) removeFailed(name, kubeconfig string) {
	quiet := p.Settle
	if quiet == 0 {
		quiet = settleFor
	}
	p.Runtime.Delete(name, kubeconfig) // the kubeconfig's context too, whatever the engine lists
	var quietSince time.Time
	for deadline := time.Now().Add(settleMax); time.Now().Before(deadline); time.Sleep(min(settlePoll, quiet)) {
		ns, err := p.Runtime.Nodes(name)
		if err != nil || len(ns) > 0 {
			quietSince = time.Time{}
			p.Runtime.Delete(name, kubeconfig)
			continue
		}
		if quietSince.IsZero() {
			quietSince = time.Now()
		}
		if time.Since(quietSince) >= quiet {
			return
		}
	}
}
