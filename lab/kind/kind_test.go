package kind

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/yaml"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/ebpf/datapath"
	"github.com/k8sguide/k8sguide/dataplanes/engines"
	"github.com/k8sguide/k8sguide/lab"
)

const pinned136 = "kindest/node:v1.36.4@sha256:099e049362a1526b2db71494e1947aae99bd16290d7c895f2b7ea312e3cbfaed"

func config(d dataplanes.Name, mod func(*lab.Config)) lab.Config {
	c := lab.Config{Name: "k8s-guide", Dataplane: d, Workers: 2, NodePortRange: lab.DefaultNodePortRange}
	if mod != nil {
		mod(&c)
	}
	return c
}

// TestClusterConfig checks the typed kind config for each dataplane and option, and that its YAML reads back
// strictly into kind's v1alpha4 types as the same config.
func TestClusterConfig(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cfg       lab.Config
		mode      v1alpha4.ProxyMode
		noCNI     bool
		patches   []string
		nodeCount int
	}{
		{"iptables", config(dataplanes.IPTables, nil), v1alpha4.IPTablesProxyMode, false, nil, 3},
		{"nftables", config(dataplanes.NFTables, nil), v1alpha4.NFTablesProxyMode, false, nil, 3},
		{"ipvs", config(dataplanes.IPVS, nil), v1alpha4.IPVSProxyMode, false, nil, 3},
		{"ebpf", config(dataplanes.EBPF, nil), "none", true, nil, 3},
		{"one worker", config(dataplanes.IPTables, func(c *lab.Config) { c.Workers = 1 }), v1alpha4.IPTablesProxyMode, false, nil, 2},
		{"nodeport addresses", config(dataplanes.NFTables, func(c *lab.Config) { c.NodePortAddresses = []string{"172.18.0.0/16", "primary"} }),
			v1alpha4.NFTablesProxyMode, false, []string{"apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nnodePortAddresses: [\"172.18.0.0/16\", \"primary\"]\n"}, 3},
		{"node port range", config(dataplanes.IPVS, func(c *lab.Config) { c.NodePortRange = "30000-30100" }),
			v1alpha4.IPVSProxyMode, false, []string{"kind: ClusterConfiguration\napiServer:\n  extraArgs:\n    service-node-port-range: \"30000-30100\"\n"}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl, err := MakePlan(tc.cfg, fakeCiliumValues)
			if err != nil {
				t.Fatal(err)
			}
			c := pl.Cluster
			if c.Networking.KubeProxyMode != tc.mode || c.Networking.DisableDefaultCNI != tc.noCNI {
				t.Errorf("networking %+v, want kubeProxyMode %q disableDefaultCNI %v", c.Networking, tc.mode, tc.noCNI)
			}
			if c.Networking.PodSubnet != lab.PodSubnet || c.Networking.ServiceSubnet != lab.ServiceSubnet {
				t.Errorf("subnets %s %s", c.Networking.PodSubnet, c.Networking.ServiceSubnet)
			}
			if len(c.Nodes) != tc.nodeCount || c.Nodes[0].Role != v1alpha4.ControlPlaneRole {
				t.Fatalf("nodes %+v", c.Nodes)
			}
			for _, n := range c.Nodes[1:] {
				if n.Role != v1alpha4.WorkerRole {
					t.Errorf("node role %s", n.Role)
				}
			}
			for _, n := range c.Nodes {
				if n.Image != pinned136 || n.Labels[DataplaneLabel] != string(tc.cfg.Dataplane) {
					t.Errorf("node image %s labels %v", n.Image, n.Labels)
				}
			}
			if !reflect.DeepEqual(c.KubeadmConfigPatches, tc.patches) {
				t.Errorf("patches %q, want %q", c.KubeadmConfigPatches, tc.patches)
			}
			if (pl.CiliumValues != nil) != (tc.cfg.Dataplane == dataplanes.EBPF) {
				t.Errorf("cilium values %v for %s", pl.CiliumValues, tc.cfg.Dataplane)
			}
			// The YAML is what a user would hand `kind create cluster --config`: it must read back strictly.
			data, err := pl.YAML()
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(data), "\n---\n")
			var back v1alpha4.Cluster
			if err := yaml.UnmarshalStrict([]byte(first), &back); err != nil {
				t.Fatalf("kind config does not read back: %v\n%s", err, first)
			}
			if !reflect.DeepEqual(&back, c) {
				t.Errorf("read back %+v, want %+v", back, *c)
			}
			// Every patch is a YAML object kind can match: it names its kind.
			for _, p := range c.KubeadmConfigPatches {
				var m map[string]any
				if err := yaml.UnmarshalStrict([]byte(p), &m); err != nil || m["kind"] == nil {
					t.Errorf("patch %q: %v", p, err)
				}
			}
		})
	}
}

func fakeCiliumValues(cfg lab.Config) (map[string]any, string, error) {
	return map[string]any{"kubeProxyReplacement": true, "k8sServiceHost": cfg.Name + "-control-plane"}, "cilium 1.20.2", nil
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  lab.Config
		want string
	}{
		{config(dataplanes.EBPF, func(c *lab.Config) { c.NodePortAddresses = []string{"10.0.0.0/8"} }), "--nodeport-addresses is kube-proxy's"},
		{config(dataplanes.IPTables, func(c *lab.Config) { c.NodePortAddresses = []string{"ten"} }), "not a CIDR"},
		{config(dataplanes.IPTables, func(c *lab.Config) { c.LBAlgorithm = "maglev" }), "needs --dataplane ebpf"},
		{config(dataplanes.EBPF, func(c *lab.Config) { c.LBAlgorithm = "roundrobin" }), "want random or maglev"},
		{config(dataplanes.IPTables, func(c *lab.Config) { c.Workers = 50 }), "--workers 50"},
		{config(dataplanes.IPTables, func(c *lab.Config) { c.Name = "Bad_Name" }), "invalid lab name"},
		{config(dataplanes.IPTables, func(c *lab.Config) { c.NodePortRange = "30000-20000" }), "30000-20000"},
		{config(dataplanes.IPTables, func(c *lab.Config) { c.Image = "nginx:latest" }), "want a kind node image"},
		{config(dataplanes.IPTables, func(c *lab.Config) { c.Image = pinned136; c.KubernetesVersion = "1.36" }), "one or the other"},
		{config(dataplanes.IPTables, func(c *lab.Config) { c.KubernetesVersion = "one" }), "want a version"},
	} {
		if _, err := MakePlan(tc.cfg, fakeCiliumValues); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

func TestNodeImage(t *testing.T) {
	for _, tc := range []struct{ image, version, want, warning string }{
		{"", "", pinned136, ""},
		{"", "1.36", pinned136, ""},
		{"", "v1.36.4", pinned136, ""},
		{"", "1.37", NodeImages["1.37.0"], ""},
		{"", "1.35.2", "kindest/node:v1.35.2", "pulled by tag"},
		{"registry.local/kindest/node:v1.36.4", "", "registry.local/kindest/node:v1.36.4", ""},
	} {
		img, _, warning, err := NodeImage(tc.image, tc.version)
		if err != nil || img != tc.want || !strings.Contains(warning, tc.warning) || (tc.warning == "") != (warning == "") {
			t.Errorf("NodeImage(%q, %q) = %q, %q, %v; want %q (warning %q)", tc.image, tc.version, img, warning, err, tc.want, tc.warning)
		}
	}
}

// fakeDocker puts a `docker` on PATH that answers what kind asks before it makes anything (info, ps) and refuses
// to pull, logging every call. kind's own create path then runs for real up to the image pull: defaulting,
// conversion and validation of our config happen in kind's code, not ours.
func fakeDocker(t *testing.T, clusters string) (logPath string) {
	t.Helper()
	dir := t.TempDir()
	logPath = filepath.Join(dir, "docker.log")
	script := `#!/bin/sh
echo "$*" >> "$DOCKER_LOG"
case "$1" in
info) echo '{"CgroupDriver":"systemd","CgroupVersion":"2","MemoryLimit":true,"PidsLimit":true,"CPUShares":true,"SecurityOptions":["name=seccomp,profile=builtin"],"ServerVersion":"28.0.0"}' ;;
ps) printf '%s' "$FAKE_CLUSTERS" ;;
pull) echo "Error response from daemon: pull access denied (fake docker)" >&2; exit 1 ;;
*) echo "fake docker: $1 not supported" >&2; exit 1 ;;
esac
`
	if err := os.WriteFile(filepath.Join(dir, "docker"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("DOCKER_LOG", logPath)
	t.Setenv("FAKE_CLUSTERS", clusters)
	t.Setenv("KUBECONFIG", filepath.Join(dir, "kubeconfig"))
	return logPath
}

// TestKindValidatesConfig hands every dataplane's config to kind's own Create (through a fake docker): kind must
// accept it and go on to pull the pinned node image. A config kind rejects shows that its validation ran.
func TestKindValidatesConfig(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh for the fake docker")
	}
	log := fakeDocker(t, "")
	rt := NewDockerRuntime()
	// kind retries a failed pull for 10 s: the dataplanes run side by side.
	t.Run("dataplanes", func(t *testing.T) {
		for _, d := range engines.Names() {
			t.Run(string(d), func(t *testing.T) {
				t.Parallel()
				acceptedByKind(t, rt, d, log)
			})
		}
	})
	// kind's validation is what rejects these, before anything is pulled.
	bad := map[string]func(*v1alpha4.Cluster){
		"invalid kubeProxyMode":  func(c *v1alpha4.Cluster) { c.Networking.KubeProxyMode = "userspace" },
		"must have at least one": func(c *v1alpha4.Cluster) { c.Nodes = c.Nodes[1:] },
		"invalid pod subnet":     func(c *v1alpha4.Cluster) { c.Networking.PodSubnet = "10.244.0.0" },
		"invalid service subnet": func(c *v1alpha4.Cluster) { c.Networking.ServiceSubnet = "bogus" },
	}
	for want, spoil := range bad {
		kc, _ := ClusterConfig(config(dataplanes.IPTables, nil), pinned136)
		spoil(kc)
		os.Remove(log)
		err := rt.Create("kv-bad", kc, "", false, 0)
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(want)) {
			t.Errorf("spoilt config (%s): kind said %v", want, err)
		}
		if calls, _ := os.ReadFile(log); strings.Contains(string(calls), "pull") {
			t.Errorf("spoilt config (%s) reached the pull", want)
		}
	}
}

// acceptedByKind hands one dataplane's config, with every option set, to kind's Create.
func acceptedByKind(t *testing.T, rt Runtime, d dataplanes.Name, log string) {
	cfg := config(d, func(c *lab.Config) { c.NodePortRange = "30000-30100" })
	if d != dataplanes.EBPF {
		cfg.NodePortAddresses = []string{"172.18.0.0/16"}
	}
	kc, err := ClusterConfig(cfg, pinned136)
	if err != nil {
		t.Fatal(err)
	}
	err = rt.Create("kv-"+string(d), kc, "", false, 0)
	if err == nil || !strings.Contains(err.Error(), "failed to pull image") {
		t.Fatalf("%s: kind did not get to the image pull: %v", d, err)
	}
	calls, _ := os.ReadFile(log)
	if !strings.Contains(string(calls), "pull "+pinned136) {
		t.Errorf("%s: kind did not pull the pinned image; docker calls:\n%s", d, calls)
	}
	if got := createError(err, pinned136).Error(); !strings.HasPrefix(got, "could not pull the kind node image "+pinned136) || strings.Contains(got, "\n") {
		t.Errorf("pull failure reads %q", got)
	}
}

// fakeProvider is the provider on a fake runtime and a fake apiserver.
// installer is a CiliumInstaller whose chart is at hand and whose install is install.
func installer(install CiliumInstall) CiliumInstaller {
	return func(context.Context, CiliumSource, io.Writer) (CiliumInstall, error) { return install, nil }
}

func fakeProvider(t *testing.T) (*Provider, *fakeRuntime, *fake.Clientset) {
	rt := newFakeRuntime()
	cs := fake.NewClientset()
	host, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &Provider{
		Runtime:   rt,
		Clientset: func([]byte) (kubernetes.Interface, error) { return cs, nil },
		Tools:     NewTools(host),
		Engine:    func(context.Context) error { return nil },
		Settle:    10 * time.Millisecond, // the fake engine has no late work
	}
	return p, rt, cs
}

// addNodes puts the cluster's nodes into the fake apiserver, labelled as kind would from the config, Ready, each
// with a ready proxy pod; mod, when given, changes each node before it is made.
func addNodes(t *testing.T, cs *fake.Clientset, rt *fakeRuntime, name string, d dataplanes.Name, mod ...func(*v1.Node)) {
	t.Helper()
	ctx := context.Background()
	for i, n := range rt.clusterNodes(name) {
		node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: map[string]string{DataplaneLabel: string(d)}},
			Spec:   v1.NodeSpec{PodCIDR: "10.244." + string(rune('0'+i)) + ".0/24"},
			Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}}}
		for _, m := range mod {
			m(node)
		}
		if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		app := proxyApp(d)
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: app + "-" + n.name, Labels: map[string]string{"k8s-app": app}},
			Spec:   v1.PodSpec{NodeName: n.name},
			Status: v1.PodStatus{Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}}}
		if _, err := cs.CoreV1().Pods("kube-system").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// addNodesOnceCreated does addNodes as soon as the fake kind made the cluster's nodes, as kind's kubelets register
// them.
func addNodesOnceCreated(t *testing.T, cs *fake.Clientset, rt *fakeRuntime, name string, d dataplanes.Name, mod ...func(*v1.Node)) {
	go func() {
		for len(rt.clusterNodes(name)) == 0 {
			time.Sleep(time.Millisecond)
		}
		addNodes(t, cs, rt, name, d, mod...)
	}()
}

func TestCreate(t *testing.T) {
	ctx := context.Background()
	t.Run("no engine", func(t *testing.T) {
		p, rt, _ := fakeProvider(t)
		p.Engine = func(context.Context) error {
			return errors.New("no Docker engine answers (Cannot connect to the Docker daemon)")
		}
		err := p.Create(ctx, config(dataplanes.IPTables, nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--provider netns") || len(rt.created) != 0 {
			t.Fatalf("got %v, created %d", err, len(rt.created))
		}
	})
	t.Run("exists", func(t *testing.T) {
		p, rt, _ := fakeProvider(t)
		rt.clusters["k8s-guide"] = nil
		err := p.Create(ctx, config(dataplanes.IPTables, nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), `kind cluster named "k8s-guide" already exists`) || len(rt.created) != 0 {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("pull failure", func(t *testing.T) {
		p, rt, _ := fakeProvider(t)
		rt.createErr = errors.New(`failed to pull image "` + pinned136 + `": command "docker pull ..." failed with error: exit status 1`)
		err := p.Create(ctx, config(dataplanes.IPTables, nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "could not pull the kind node image") || len(rt.clusters) != 0 {
			t.Fatalf("got %v, clusters %v", err, rt.clusters)
		}
	})
	t.Run("iptables", func(t *testing.T) {
		p, rt, cs := fakeProvider(t)
		p.WaitForReady = time.Minute
		addNodesOnceCreated(t, cs, rt, "k8s-guide", dataplanes.IPTables)
		var progress bytes.Buffer
		if err := p.Create(ctx, config(dataplanes.IPTables, nil), &progress); err != nil {
			t.Fatal(err)
		}
		out := progress.String()
		for _, want := range []string{"kubeconfig", "context kind-k8s-guide", "k8s-guide-worker2", "172.18.0.4"} {
			if !strings.Contains(strings.ToLower(out), strings.ToLower(want)) {
				t.Errorf("progress lacks %q:\n%s", want, out)
			}
		}
		if len(rt.created) != 1 || len(rt.deleted) != 0 {
			t.Fatalf("created %d deleted %v", len(rt.created), rt.deleted)
		}
	})
	t.Run("a node that does not forward", func(t *testing.T) {
		p, rt, cs := fakeProvider(t)
		rt.sysctls = map[string]map[string]string{"k8s-guide-worker2": {"net.ipv4.ip_forward": "0"}}
		addNodesOnceCreated(t, cs, rt, "k8s-guide", dataplanes.IPTables)
		var progress bytes.Buffer
		if err := p.Create(ctx, config(dataplanes.IPTables, nil), &progress); err != nil {
			t.Fatal(err)
		}
		for _, n := range rt.clusterNodes("k8s-guide") {
			wrote := slices.ContainsFunc(n.commands(), func(a []string) bool { return slices.Equal(a, []string{"sysctl", "-w", "net.ipv4.ip_forward=1"}) })
			if off := n.name == "k8s-guide-worker2"; wrote != off || (off && n.sysctls["net.ipv4.ip_forward"] != "1") {
				t.Errorf("%s: forwarding turned on %v, sysctls %v", n.name, wrote, n.sysctls)
			}
		}
		if !strings.Contains(progress.String(), "IPv4 forwarding was off in k8s-guide-worker2") {
			t.Errorf("progress does not say so:\n%s", progress.String())
		}
	})
	t.Run("cgroup v1", func(t *testing.T) {
		for _, v := range []string{"1", "2"} {
			p, rt, cs := fakeProvider(t)
			rt.cgroupVersion = v
			addNodesOnceCreated(t, cs, rt, "k8s-guide", dataplanes.IPTables)
			var progress bytes.Buffer
			if err := p.Create(ctx, config(dataplanes.IPTables, nil), &progress); err != nil {
				t.Fatal(err)
			}
			if len(rt.created) != 1 {
				t.Fatalf("cgroup v%s: created %d", v, len(rt.created))
			}
			patched := slices.Contains(rt.created[0].KubeadmConfigPatches, CgroupV1Patch)
			if patched != (v == "1") || strings.Contains(progress.String(), "failCgroupV1") != (v == "1") {
				t.Errorf("cgroup v%s: failCgroupV1 patch %v, progress:\n%s", v, patched, progress.String())
			}
		}
	})
	t.Run("down removes the context from the kubeconfig up wrote", func(t *testing.T) {
		dir := t.TempDir()
		t.Chdir(dir)
		for _, flag := range []string{"", "kubeconfig"} {
			p, rt, cs := fakeProvider(t)
			addNodesOnceCreated(t, cs, rt, "k8s-guide", dataplanes.IPTables)
			if err := p.Create(ctx, config(dataplanes.IPTables, func(c *lab.Config) { c.Kubeconfig = flag }), io.Discard); err != nil {
				t.Fatal(err)
			}
			if err := p.Delete(ctx, "k8s-guide"); err != nil {
				t.Fatal(err)
			}
			want := "" // kind's rules, as at up
			if flag != "" {
				want = filepath.Join(dir, flag)
			}
			if len(rt.deletedKubeconfigs) != 1 || rt.deletedKubeconfigs[0] != want {
				t.Errorf("up --kubeconfig %q: down deleted with kubeconfig %q, want %q", flag, rt.deletedKubeconfigs, want)
			}
		}
	})
	t.Run("workers that join after kind returns", func(t *testing.T) {
		// kind waits for the control-plane node only; a Deployment made before the workers are Ready lands on
		// whichever was first. up waits for every node, untainted, with a ready proxy.
		p, rt, cs := fakeProvider(t)
		p.WaitForReady = time.Minute
		addNodesOnceCreated(t, cs, rt, "k8s-guide", dataplanes.NFTables, func(n *v1.Node) {
			if n.Name == "k8s-guide-worker2" {
				n.Status.Conditions[0].Status = v1.ConditionFalse
				n.Spec.Taints = []v1.Taint{{Key: v1.TaintNodeNotReady, Effect: v1.TaintEffectNoSchedule}}
			}
		})
		joined := make(chan struct{})
		go func() {
			// Ready first, the node lifecycle controller's taint removed a moment later.
			defer close(joined)
			var n *v1.Node
			for err := errors.New("not yet"); err != nil; {
				time.Sleep(time.Millisecond)
				n, err = cs.CoreV1().Nodes().Get(ctx, "k8s-guide-worker2", metav1.GetOptions{})
			}
			time.Sleep(time.Second)
			n.Status.Conditions[0].Status = v1.ConditionTrue
			cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			time.Sleep(time.Second)
			n.Spec.Taints = nil
			cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		}()
		var progress bytes.Buffer
		if err := p.Create(ctx, config(dataplanes.NFTables, nil), &progress); err != nil {
			t.Fatal(err)
		}
		select {
		case <-joined:
		default:
			t.Fatalf("up returned before worker2 was Ready and untainted:\n%s", progress.String())
		}
		if !strings.Contains(progress.String(), "for every node and its proxy to be Ready") {
			t.Errorf("progress does not say it waits:\n%s", progress.String())
		}
	})
	t.Run("a worker that never gets Ready", func(t *testing.T) {
		for _, retain := range []bool{false, true} {
			p, rt, cs := fakeProvider(t)
			p.WaitForReady = 2 * time.Second
			addNodesOnceCreated(t, cs, rt, "k8s-guide", dataplanes.IPTables, func(n *v1.Node) {
				if n.Name == "k8s-guide-worker" {
					n.Status.Conditions = nil // its kubelet never posted a status
				}
			})
			err := p.Create(ctx, config(dataplanes.IPTables, func(c *lab.Config) { c.Retain = retain }), io.Discard)
			want := "lab k8s-guide: not ready after 2s: k8s-guide-worker is not Ready"
			if err == nil || err.Error() != want {
				t.Fatalf("got %v, want %s", err, want)
			}
			if kept := len(rt.clusters) == 1; kept != retain {
				t.Errorf("retain %v: clusters %v", retain, rt.clusters)
			}
		}
	})
	t.Run("ebpf", func(t *testing.T) {
		p, rt, cs := fakeProvider(t)
		var sawKubeconfig string
		p.Cilium = installer(func(ctx context.Context, kubeconfig string, cfg lab.Config, src CiliumSource, progress io.Writer) error {
			data, err := os.ReadFile(kubeconfig)
			sawKubeconfig = string(data)
			addNodes(t, cs, rt, cfg.Name, dataplanes.EBPF)
			return err
		})
		if err := p.Create(ctx, config(dataplanes.EBPF, nil), io.Discard); err != nil {
			t.Fatal(err)
		}
		if sawKubeconfig != rt.kubeconf {
			t.Errorf("Cilium got kubeconfig %q", sawKubeconfig)
		}
		st, err := p.Status(ctx, "k8s-guide")
		if err != nil || st.Dataplane != dataplanes.EBPF || len(st.Nodes) != 3 || st.Nodes[0].Name != "k8s-guide-control-plane" || st.Client != "172.18.0.1" {
			t.Fatalf("status %+v %v", st, err)
		}
	})
	t.Run("ebpf offline", func(t *testing.T) {
		// The engine holds Cilium's images built from source; the nodes lack CAP_SYS_RESOURCE (as on these
		// machines) and share one cgroup namespace.
		p, rt, cs := fakeProvider(t)
		agent, operator := datapath.LocalImages()
		rt.images = map[string]bool{agent: true, operator: true}
		rt.onCreate = func(n *fakeNode) {
			n.files["/proc/1/status"] = []byte("CapBnd:\t000001fffeffffff\n")
			n.files["/proc/1/ns/cgroup"] = []byte("cgroup:[4026531835]")
		}
		var got CiliumSource
		p.Cilium = installer(func(ctx context.Context, kubeconfig string, cfg lab.Config, src CiliumSource, progress io.Writer) error {
			got = src
			addNodes(t, cs, rt, cfg.Name, dataplanes.EBPF)
			return nil
		})
		var progress bytes.Buffer
		if err := p.Create(ctx, config(dataplanes.EBPF, nil), &progress); err != nil {
			t.Fatal(err)
		}
		if !got.Local || !slices.Equal(got.Images, []string{agent, operator}) || !slices.Equal(got.WithoutCapabilities, []string{"SYS_RESOURCE"}) || !got.SharedCgroupNamespace {
			t.Errorf("Cilium got %+v, want the local images, without SYS_RESOURCE, with the socket LB off", got)
		}
		if len(rt.loaded) != 3 || !strings.HasSuffix(rt.loaded[0], ": "+agent+" "+operator) {
			t.Errorf("images loaded: %q, want both into each of the 3 nodes", rt.loaded)
		}
		for _, want := range []string{"built from source", "cannot grant SYS_RESOURCE", "share one cgroup namespace"} {
			if !strings.Contains(progress.String(), want) {
				t.Errorf("progress does not say %q:\n%s", want, progress.String())
			}
		}
		for _, line := range strings.Split(progress.String(), "\n") {
			// (The Creating line names kind's default image with its digest: wider, and not this test's.)
			if utf8.RuneCountInString(line) > 100 && !strings.HasPrefix(line, "Creating lab") {
				t.Errorf("progress line wider than 100 columns: %q", line)
			}
		}
	})
	t.Run("cilium not ready", func(t *testing.T) {
		for _, retain := range []bool{false, true} {
			p, rt, _ := fakeProvider(t)
			p.Cilium = installer(func(context.Context, string, lab.Config, CiliumSource, io.Writer) error {
				return errors.New("waited 5m0s for Cilium to be ready: daemonset cilium: 1 of 3 ready")
			})
			err := p.Create(ctx, config(dataplanes.EBPF, func(c *lab.Config) { c.Retain = retain }), io.Discard)
			if err == nil || !strings.Contains(err.Error(), "for Cilium to be ready") {
				t.Fatalf("got %v", err)
			}
			if kept := len(rt.clusters) == 1; kept != retain {
				t.Errorf("retain %v: cluster kept %v (deleted %v)", retain, kept, rt.deleted)
			}
		}
	})
	t.Run("no chart", func(t *testing.T) {
		// Cilium's chart is fetched before the cluster is made: a registry that does not answer costs none.
		p, rt, _ := fakeProvider(t)
		p.Cilium = func(context.Context, CiliumSource, io.Writer) (CiliumInstall, error) {
			return nil, errors.New("pulling Cilium chart oci://quay.io/cilium/charts/cilium:1.20.2: no network")
		}
		err := p.Create(ctx, config(dataplanes.EBPF, nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "pulling Cilium chart") {
			t.Fatalf("got %v", err)
		}
		if len(rt.clusters) != 0 || len(rt.deleted) != 0 {
			t.Errorf("clusters %v, deleted %v: want none made", rt.clusters, rt.deleted)
		}
	})
	// interrupted starts a Create that kind blocks in, interrupts it, and returns its error once it returns
	// (finish: the test lets kind finish its work; otherwise only removing its nodes can end it).
	interrupted := func(t *testing.T, p *Provider, rt *fakeRuntime, retain, finish bool) error {
		t.Helper()
		rt.block = make(chan struct{})
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- p.Create(cctx, config(dataplanes.IPTables, func(c *lab.Config) { c.Retain = retain }), io.Discard)
		}()
		cancel()
		if finish {
			time.Sleep(20 * time.Millisecond)
			close(rt.block) // kind finishes what it was doing
		}
		select {
		case err := <-done:
			return err
		case <-time.After(time.Minute):
			t.Fatal("the interrupted up did not return while kind was still making the cluster")
			return nil
		}
	}
	t.Run("interrupted", func(t *testing.T) {
		// kind is never let finish: removing its nodes under it ends it.
		p, rt, _ := fakeProvider(t)
		if err := interrupted(t, p, rt, false, false); !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v", err)
		}
		if len(rt.clusters) != 0 || len(rt.deleted) == 0 || len(rt.created) != 0 {
			t.Fatalf("left %v, deleted %v, kind finished %d", rt.clusters, rt.deleted, len(rt.created))
		}
	})
	t.Run("interrupted, the engine still making nodes", func(t *testing.T) {
		// The engine finishes two node containers after the first two of our removals: removed too.
		p, rt, _ := fakeProvider(t)
		rt.late = 2
		if err := interrupted(t, p, rt, false, false); !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v", err)
		}
		if len(rt.clusters) != 0 || len(rt.deleted) < 3 {
			t.Fatalf("left %v, deleted %v", rt.clusters, rt.deleted)
		}
	})
	t.Run("interrupted with --retain", func(t *testing.T) {
		// --retain keeps what kind made: up waits for kind and removes nothing.
		p, rt, _ := fakeProvider(t)
		if err := interrupted(t, p, rt, true, true); !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v", err)
		}
		if len(rt.clusters) != 1 || len(rt.deleted) != 0 {
			t.Fatalf("left %v, deleted %v: want the cluster kept", rt.clusters, rt.deleted)
		}
	})
}

func (r *fakeRuntime) clusterNodes(name string) []*fakeNode {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.clusters[name]
}

// TestExecAndToolPath runs commands and copies k8sguide through the fake node runtime.
func TestExecAndToolPath(t *testing.T) {
	ctx := context.Background()
	p, rt, cs := fakeProvider(t)
	rt.Create("lab1", &v1alpha4.Cluster{Nodes: []v1alpha4.Node{{Role: v1alpha4.ControlPlaneRole}, {Role: v1alpha4.WorkerRole}}}, "", false, 0)
	worker := rt.clusters["lab1"][1]

	var out bytes.Buffer
	argv := []string{"iptables-save", "-t", "nat"}
	if err := p.Exec(ctx, "lab1", "lab1-worker", argv, lab.Streams{Out: &out}); err != nil {
		t.Fatal(err)
	}
	if got := worker.commands(); len(got) != 1 || !reflect.DeepEqual(got[0], argv) || out.String() != "ran iptables-save -t nat\n" {
		t.Fatalf("ran %q, out %q", got, out.String())
	}
	// A command's exit status comes back as os/exec's, for `k8sguide exec` to exit with.
	worker.exit = runError(exitError(3))
	err := p.Exec(ctx, "lab1", "lab1-worker", []string{"false"}, lab.Streams{Out: io.Discard})
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("exit: %v", err)
	}
	worker.exit = nil
	var nf *lab.NotFoundError
	if err := p.Exec(ctx, "lab1", "lab1-worker7", []string{"true"}, lab.Streams{}); !errors.As(err, &nf) || !strings.Contains(err.Error(), "lab1-client") {
		t.Fatalf("unknown node: %v", err)
	}
	if err := p.Exec(ctx, "nolab", "x", []string{"true"}, lab.Streams{}); !errors.As(err, &nf) {
		t.Fatalf("unknown lab: %v", err)
	}
	// The client is this host.
	out.Reset()
	if err := p.Exec(ctx, "lab1", "lab1-client", []string{"echo", "host"}, lab.Streams{Out: &out}); err != nil || out.String() != "host\n" {
		t.Fatalf("client exec: %v %q", err, out.String())
	}

	// A pod: the command runs in its node, in the network namespace of its container's process.
	worker.pids = map[string]string{"c0ffee": "4242"}
	pod := func(name, node, id string) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: v1.PodSpec{NodeName: node}}
		if id != "" {
			p.Status.ContainerStatuses = []v1.ContainerStatus{{ContainerID: id, State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}}
		}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pod("web-1", "lab1-worker", "containerd://c0ffee")
	pod("web-2", "lab1-worker", "")
	before := len(worker.commands())
	out.Reset()
	if err := p.Exec(ctx, "lab1", "web-1", []string{"ip", "addr"}, lab.Streams{Out: &out}); err != nil {
		t.Fatal(err)
	}
	if want := "ran nsenter --net=/proc/4242/ns/net -- ip addr\n"; out.String() != want {
		t.Errorf("in a pod: %q, want %q (%q)", out.String(), want, worker.commands()[before:])
	}
	if err := p.Exec(ctx, "lab1", "web-2", []string{"true"}, lab.Streams{}); err == nil || !strings.Contains(err.Error(), "pod web-2 is not running") {
		t.Errorf("a pod not running: %v", err)
	}
	if err := p.Exec(ctx, "lab1", "web-3", []string{"true"}, lab.Streams{}); !errors.As(err, &nf) || !strings.Contains(err.Error(), `no node or pod named "web-3"`) {
		t.Errorf("no such pod: %v", err)
	}

	// ToolPath copies this (Linux) binary in once; the second call finds the same bytes and copies nothing.
	path, err := p.ToolPath(ctx, "lab1", "lab1-worker")
	if err != nil {
		if strings.Contains(err.Error(), "make cross") {
			t.Skipf("this host cannot give the node a binary: %v", err)
		}
		t.Fatal(err)
	}
	host, _ := os.ReadFile(p.Tools.Host)
	if path != NodeToolPath || !bytes.Equal(worker.files[NodeToolPath], host) || worker.modes[NodeToolPath] != "0755" {
		t.Fatalf("path %s: %d bytes copied of %d, mode %q", path, len(worker.files[NodeToolPath]), len(host), worker.modes[NodeToolPath])
	}
	if _, leftover := worker.files[NodeToolPath+".tmp"]; leftover {
		t.Error("temporary copy left in the node")
	}
	before = len(worker.commands())
	if _, err := p.ToolPath(ctx, "lab1", "lab1-worker"); err != nil {
		t.Fatal(err)
	}
	for _, c := range worker.commands()[before:] {
		if c[0] == "tee" {
			t.Errorf("copied again: %q", worker.commands()[before:])
		}
	}
	// The next command (its own Tools) finds the node's copy in one exec, without asking the node's architecture.
	p.Tools = NewTools(p.Tools.Host)
	before = len(worker.commands())
	if _, err := p.ToolPath(ctx, "lab1", "lab1-worker"); err != nil {
		t.Fatal(err)
	}
	if got := worker.commands()[before:]; len(got) != 1 || got[0][0] != "sha256sum" {
		t.Errorf("a node that holds this binary: ran %q, want only sha256sum", got)
	}
	// A node of another architecture needs a build for it.
	cp := rt.clusters["lab1"][0]
	cp.machine = "aarch64"
	if _, err := p.ToolPath(ctx, "lab1", "lab1-control-plane"); err == nil || !strings.Contains(err.Error(), "make cross") {
		t.Errorf("arm64 node: %v", err)
	}
	cp.machine = "riscv64"
	if _, err := p.ToolPath(ctx, "lab1", "lab1-control-plane"); err == nil || !strings.Contains(err.Error(), "not supported") {
		t.Errorf("riscv64 node: %v", err)
	}
	// The client runs this binary itself.
	if path, err := p.ToolPath(ctx, "lab1", "lab1-client"); err != nil || path != p.Tools.Host {
		t.Errorf("client tool path %q %v", path, err)
	}
}

// TestNotSchedulable: each reason a node cannot take the lab's pods yet.
func TestNotSchedulable(t *testing.T) {
	ctx := context.Background()
	p, rt, cs := fakeProvider(t)
	rt.Create("lab1", &v1alpha4.Cluster{Nodes: []v1alpha4.Node{{Role: v1alpha4.ControlPlaneRole}, {Role: v1alpha4.WorkerRole},
		{Role: v1alpha4.WorkerRole}, {Role: v1alpha4.WorkerRole}}}, "", false, 0)
	addNodes(t, cs, rt, "lab1", dataplanes.EBPF, func(n *v1.Node) {
		switch n.Name {
		case "lab1-worker":
			n.Status.Conditions[0].Status = v1.ConditionUnknown
		case "lab1-worker2":
			n.Spec.Taints = []v1.Taint{{Key: v1.TaintNodeNotReady, Effect: v1.TaintEffectNoExecute}}
		}
	})
	pod, err := cs.CoreV1().Pods("kube-system").Get(ctx, "cilium-lab1-worker3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Conditions[0].Status = v1.ConditionFalse
	cs.CoreV1().Pods("kube-system").Update(ctx, pod, metav1.UpdateOptions{})
	why, err := p.notSchedulable(ctx, cs, []string{"lab1-control-plane", "lab1-worker", "lab1-worker2", "lab1-worker3", "lab1-worker4"}, dataplanes.EBPF)
	want := []string{"lab1-worker is not Ready", "lab1-worker2 still has the node.kubernetes.io/not-ready taint",
		"lab1-worker3 runs no ready cilium pod", "lab1-worker4 has not joined"}
	if err != nil || !slices.Equal(why, want) {
		t.Fatalf("got %q %v, want %q", why, err, want)
	}
}
