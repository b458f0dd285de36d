package netns_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/k8sguide/k8sguide/internal/e2etest"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/netns"
)

// TestControlPlane brings up a lab and reads it with the built-in kubectl, as a student following the guide
// would: the nodes as kind shows them, the kubernetes Service, the apiserver's refusal of bad objects, and the
// control plane coming back after it is killed.
func TestControlPlane(t *testing.T) {
	needRoot(t, "iptables-restore")
	name := "e2e-cp"
	upLab(t, name)
	kubectl := func(args ...string) (string, error) {
		return k8sguide(t, append([]string{"kubectl", "--name", name}, args...)...)
	}

	out, err := kubectl("get", "nodes", "-o", "wide")
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range [][]string{
		{name + "-control-plane", "Ready", "control-plane", "v1.36.4", "172.18.0.2"},
		{name + "-worker", "Ready", "<none>", "v1.36.4", "172.18.0.3"},
		{name + "-worker2", "Ready", "<none>", "v1.36.4", "172.18.0.4"},
	} {
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 4 {
			t.Fatalf("want a header and 3 nodes, got:\n%s", out)
		}
		f := strings.Fields(lines[i+1])
		if got := []string{f[0], f[1], f[2], f[4], f[5]}; strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("node %d: got %v, want %v", i, got, want)
		}
	}
	// The node-IPAM controller gave each node a pod CIDR, the lab wired each node's pod bridge from it (as
	// kindnet does), and the control-plane node is tainted as kubeadm taints it.
	out, err = kubectl("get", "nodes", "-o", "jsonpath={range .items[*]}{.metadata.name} {.spec.podCIDR} {.spec.taints[*].key}{\"\\n\"}{end}")
	if err != nil {
		t.Fatal(err)
	}
	status, err := provider().Status(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range status.Nodes {
		want := n.Name + " " + n.PodCIDR + " "
		if n.Role == lab.ControlPlane {
			want += "node-role.kubernetes.io/control-plane"
		}
		if !strings.HasPrefix(n.PodCIDR, "10.244.") || !strings.Contains(out, want+"\n") {
			t.Errorf("want %q (the lab's record) in:\n%s", want, out)
		}
		gw := strings.TrimSuffix(n.PodCIDR, "0/24") + "1/24"
		if addr := mustK8sguide(t, "exec", "--name", name, n.Name, "--", "ip", "-o", "addr", "show", "cni0"); !strings.Contains(addr, " "+gw+" ") {
			t.Errorf("%s: cni0 lacks %s:\n%s", n.Name, gw, addr)
		}
	}
	// The kubernetes Service points at the apiserver where it listens, as in every real dump.
	if out, err = kubectl("get", "endpointslices", "-l", "kubernetes.io/service-name=kubernetes", "-o", "jsonpath={.items[0].endpoints[0].addresses[0]}:{.items[0].ports[0].port}"); err != nil || out != "172.18.0.2:6443" {
		t.Errorf("kubernetes EndpointSlice: %q, %v; want 172.18.0.2:6443", out, err)
	}

	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"create", "service", "nodeport", "bad name", "--tcp=80"}, `Invalid value: "bad name"`},
		{[]string{"create", "-f", manifest(t, "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {type: NodePort, ports: [{port: 70000}]}\n")}, "must be between 1 and 65535"},
		{[]string{"create", "-f", manifest(t, "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {type: Foo, ports: [{port: 80}]}\n")}, `Unsupported value: "Foo"`},
		{[]string{"create", "-f", manifest(t, "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {ports: [{name: a, port: 80}, {name: a, port: 80}]}\n")}, "Duplicate value"},
		{[]string{"create", "deployment", "WEB", "--image=nginx"}, `Invalid value: "WEB"`},
		{[]string{"create", "service", "nodeport", "web", "--tcp=80", "--node-port=80"}, "provided port is not in the valid range"},
	} {
		_, err := kubectl(bad.args...)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("kubectl %v: got %v, want the apiserver's %q", bad.args, err, bad.want)
		}
	}

	// A killed control plane is started again by the control-plane node's agent, with the cluster kept in
	// etcd.
	pid := controlPlanePID(t, name)
	if err := exec.Command("kill", "-9", strconv.Itoa(pid)).Run(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		out, err := e2etest.Quiet("kubectl", "--name", name, "get", "nodes", "--no-headers")
		if err == nil && strings.Count(out, " Ready ") == 3 && controlPlanePID(t, name) != pid {
			break
		}
		if time.Since(start) > 15*time.Second {
			t.Fatalf("the lab's apiserver is not back 15 s after its process was killed: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("control plane back after %s", time.Since(start).Round(time.Millisecond))

	// The user's kubeconfig has the lab's context, and loses it with the lab.
	kubeconfig := os.Getenv("KUBECONFIG")
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Contexts[netns.KubeContext(name)] == nil {
		t.Errorf("%s has no context %s", kubeconfig, netns.KubeContext(name))
	}
	mustK8sguide(t, "down", "--name", name)
	if cfg, err = clientcmd.LoadFromFile(kubeconfig); err != nil || cfg.Contexts[netns.KubeContext(name)] != nil {
		t.Errorf("after down, %s still has context %s (%v)", kubeconfig, netns.KubeContext(name), err)
	}
}

// controlPlanePID is the pid of a lab's control-plane process.
func controlPlanePID(t testing.TB, name string) int {
	t.Helper()
	out, _ := exec.Command("pgrep", "-f", "internal control-plane --name "+name+"$").Output()
	f := strings.Fields(string(out))
	if len(f) != 1 {
		return 0
	}
	pid, _ := strconv.Atoi(f[0])
	return pid
}

// manifest writes a manifest for `kubectl create -f`, for objects kubectl's own flags would refuse before the
// apiserver sees them.
func manifest(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "object.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestOneNodeLab: a lab without workers runs its pods on the control-plane node, which is then not tainted
// (kind removes the taint from a cluster of one node), and its NodePort answers from all three.
func TestOneNodeLab(t *testing.T) {
	needRoot(t, "iptables-restore")
	name := "e2e-one"
	upLab(t, name, "--workers", "0")
	node := name + "-control-plane"
	if out := mustK8sguide(t, "kubectl", "--name", name, "get", "node", node, "-o", "jsonpath={.spec.taints}"); out != "" {
		t.Errorf("the only node is tainted: %s", out)
	}
	mustK8sguide(t, "deploy", "--name", name)
	mustK8sguide(t, "nodeport", "--name", name, "--check", "0")
	pr := lab.ProbeAddr(context.Background(), provider(), name, net.JoinHostPort("172.18.0.2", nodePortOf(t, name, "web")), 30)
	if pr.Failures > 0 || len(pr.Answers) != 3 {
		t.Errorf("the NodePort on the only node: %d failures (%s), answers from %v; want all 3 pods", pr.Failures, pr.LastErr, pr.Answers)
	}
}
