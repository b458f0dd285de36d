package netns_test

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/k8sguide/k8sguide/internal/e2etest"
	"github.com/k8sguide/k8sguide/lab"
)

// TestFaults breaks a working lab as a tester would and checks that it mends itself as a kind cluster does: the
// apiserver refuses bad objects and the NodePort keeps answering; a killed kube-proxy (with the node's rules
// flushed) is restarted and resyncs; a killed pod server makes its endpoint leave the EndpointSlice and come
// back once the pod's agent restarts it.
func TestFaults(t *testing.T) {
	needRoot(t, "iptables-restore")
	name := "e2e-faults"
	upLab(t, name, "--workers", "1")
	mustK8sguide(t, "deploy", "--name", name, "--replicas", "1")
	mustK8sguide(t, "nodeport", "--name", name, "--check", "0")
	port := nodePortOf(t, name, "web")
	ctx := context.Background()
	worker := lab.Node{Name: name + "-worker", IP: "172.18.0.3"}
	addr := net.JoinHostPort(worker.IP, port)
	answers := func() bool { return lab.ProbeAddr(ctx, provider(), name, addr, 1).Failures == 0 }
	waitFor := func(what string, limit time.Duration, ok func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for !ok() {
			if time.Since(start) > limit {
				t.Fatalf("%s: not within %s", what, limit)
			}
			time.Sleep(50 * time.Millisecond)
		}
		return time.Since(start)
	}

	// Bad objects are refused by the apiserver and change nothing: the NodePort still answers.
	for _, args := range [][]string{
		{"create", "service", "nodeport", "bad name", "--tcp=80"},
		{"create", "deployment", "..", "--image=nginx"},
		{"create", "-f", manifest(t, "apiVersion: v1\nkind: Service\nmetadata: {name: w2}\nspec: {type: NodePort, selector: {app: web}, ports: [{port: 0}]}\n")},
	} {
		if _, err := k8sguide(t, append([]string{"kubectl", "--name", name, "--"}, args...)...); err == nil {
			t.Errorf("kubectl %v was accepted", args)
		}
	}
	if !answers() {
		t.Fatalf("%s does not answer after the bad objects were refused", addr)
	}

	// kube-proxy killed, and its rules flushed: the agent starts it again and it writes them back.
	proxyRecord := filepath.Join(e2etest.StateDir, name, "procs", "proxy-"+worker.Name+".json")
	pid := readRecordPID(t, proxyRecord)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	mustK8sguide(t, "exec", "--name", name, worker.Name, "--", "iptables", "-t", "nat", "-F")
	took := waitFor("the NodePort answers again after kube-proxy was killed", 10*time.Second, answers)
	if readRecordPID(t, proxyRecord) == pid {
		t.Errorf("kube-proxy's pid is still %d", pid)
	}
	t.Logf("NodePort back %s after kube-proxy was killed", took.Round(time.Millisecond))

	// A pod server killed: the pod goes NotReady, its endpoint with it, and both come back.
	cs := clientset(t, name)
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods: %v, %v", pods, err)
	}
	pod := pods.Items[0]
	watch, err := cs.DiscoveryV1().EndpointSlices("default").Watch(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=web"})
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Stop()
	out, err := exec.Command("ip", "netns", "pids", name+"-pod-"+string(pod.UID)).Output()
	if err != nil || len(strings.Fields(string(out))) != 1 {
		t.Fatalf("the pod's namespace holds %q (%v), want its server alone", out, err)
	}
	server, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	if err := syscall.Kill(server, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	left, back := false, false
	timeout := time.After(30 * time.Second)
	for !back {
		select {
		case ev := <-watch.ResultChan():
			slice, ok := ev.Object.(*discoveryv1.EndpointSlice)
			if !ok {
				continue
			}
			ready := false
			for _, e := range slice.Endpoints {
				if len(e.Addresses) > 0 && e.Addresses[0] == pod.Status.PodIP && (e.Conditions.Ready == nil || *e.Conditions.Ready) {
					ready = true
				}
			}
			left = left || !ready
			back = left && ready
		case <-timeout:
			t.Fatalf("the endpoint of %s did not leave and come back within 30 s (left: %v)", pod.Name, left)
		}
	}
	got, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil || got.Status.ContainerStatuses[0].RestartCount != 1 || got.Status.ContainerStatuses[0].LastTerminationState.Terminated == nil {
		t.Errorf("pod after its server was killed: %+v, %v; want restart count 1 and the last termination", got.Status.ContainerStatuses, err)
	}
	waitFor("the NodePort answers again after the pod server was killed", 10*time.Second, answers)
}

// readRecordPID is the pid a supervised process's record (procs/KEY.json) holds.
func readRecordPID(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rec struct{ PID int }
	if err := json.Unmarshal(data, &rec); err != nil || rec.PID == 0 {
		t.Fatalf("%s: %q (%v)", path, data, err)
	}
	return rec.PID
}

// agentPID is the pid of a node's running agent, as its init reports it (0 while it is down).
func agentPID(t *testing.T, labName, node string) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e2etest.StateDir, labName, "init-"+node+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var s struct{ AgentPID int }
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return s.AgentPID
}

// TestNodeSupervision kills what a node runs as a tester would, and checks that the lab heals as a kind
// cluster does: a killed agent (the kubelet's stand-in) is started again by the node's init, and its proxy,
// pods and control plane outlive it (the NodePort answers every connection meanwhile, the pods keep their
// containers and restart counts) and are adopted by the next agent; a pod server that ends under an adopted
// agent is restarted with the code it died of; a node whose proxy stays down is named at once by a deploy,
// which says what it did; and a trace needs no apiserver.
func TestNodeSupervision(t *testing.T) {
	needRoot(t, "iptables-restore")
	name := "e2e-supervise"
	upLab(t, name, "--workers", "2")
	mustK8sguide(t, "deploy", "--name", name, "--replicas", "2")
	mustK8sguide(t, "nodeport", "--name", name, "--check", "0")
	port := nodePortOf(t, name, "web")
	ctx := context.Background()
	worker := name + "-worker"
	addr := net.JoinHostPort("172.18.0.3", port)
	cs := clientset(t, name)
	podsBefore, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	containers := map[string]string{}
	for _, p := range podsBefore.Items {
		containers[p.Name] = p.Status.ContainerStatuses[0].ContainerID
	}

	// A manifest whose third object the apiserver refuses changes nothing (it left the first two applied).
	bad := manifest(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: first}\n---\n"+
		"apiVersion: v1\nkind: Service\nmetadata: {name: second}\nspec: {selector: {app: web}, ports: [{port: 80}]}\n---\n"+
		"apiVersion: v1\nkind: Service\nmetadata: {name: third}\nspec: {selector: {app: web}, ports: [{port: 70000}]}\n")
	if _, err := k8sguide(t, "deploy", "--name", name, bad); err == nil || !strings.Contains(err.Error(), "nothing applied") {
		t.Errorf("deploy of a manifest the apiserver refuses in part: %v", err)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "first", metav1.GetOptions{}); err == nil {
		t.Error("the refused manifest's first object was applied")
	}

	// The control plane killed: it is started again at once, and a command meanwhile waits for it rather than
	// failing (or being refused, "User kubernetes-admin cannot ...", by an apiserver that has not read RBAC).
	if err := syscall.Kill(controlPlanePID(t, name), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	mustK8sguide(t, "scale", "--name", name, "--replicas", "2")

	// The worker's agent killed: every connection to its NodePort is answered while the init starts it again.
	old := agentPID(t, name, worker)
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	answered, made := 0, 0
	for agentPID(t, name, worker) == 0 || agentPID(t, name, worker) == old || time.Since(start) < 3*time.Second {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("the agent of %s is not back 30 s after it was killed", worker)
		}
		r := lab.ProbeAddr(ctx, provider(), name, addr, 1)
		made++
		answered += 1 - r.Failures
	}
	if answered != made {
		t.Errorf("%d of %d connections to %s answered while its agent was down", answered, made, addr)
	}
	t.Logf("agent back after %s; %d/%d connections answered meanwhile", time.Since(start).Round(time.Millisecond), answered, made)
	// The pods were adopted, not started again: the same containers, no restart.
	time.Sleep(time.Second)
	podsAfter, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range podsAfter.Items {
		cs0 := p.Status.ContainerStatuses[0]
		if cs0.ContainerID != containers[p.Name] || cs0.RestartCount != 0 || !cs0.Ready {
			t.Errorf("pod %s after its agent restarted: container %s (was %s), %d restarts, ready %v", p.Name, cs0.ContainerID, containers[p.Name], cs0.RestartCount, cs0.Ready)
		}
	}

	// A pod server that ends under the adopted agent (it is the init's child now) is restarted, with the code
	// the init reaped.
	var pod string
	for _, p := range podsAfter.Items {
		if p.Spec.NodeName == worker {
			pod = p.Name
		}
	}
	if pod != "" {
		id := strings.TrimPrefix(containers[pod], "netns://")
		server, _ := strconv.Atoi(id)
		if err := syscall.Kill(server, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "the adopted pod server is restarted", 30*time.Second, func() bool {
			p, err := cs.CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
			if err != nil || len(p.Status.ContainerStatuses) == 0 {
				return false
			}
			c := p.Status.ContainerStatuses[0]
			return c.RestartCount == 1 && c.Ready && c.LastTerminationState.Terminated != nil && c.LastTerminationState.Terminated.ExitCode == 137
		})
	}

	// The control-plane node's agent killed: the control plane outlives it; the apiserver answers through the
	// next agent's port forward, and a command in between waits for it rather than failing.
	cp := name + "-control-plane"
	apiserver := controlPlanePID(t, name)
	if err := syscall.Kill(agentPID(t, name, cp), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if out, err := k8sguide(t, "kubectl", "--name", name, "get", "nodes"); err != nil {
		t.Errorf("kubectl right after the control-plane node's agent was killed: %v\n%s", err, out)
	}
	if got := controlPlanePID(t, name); got != apiserver {
		t.Errorf("the control plane's pid went from %d to %d: it did not outlive the agent", apiserver, got)
	}

	// A node that is down for good (its init, agent and proxy killed): a deploy names it, says what it did on
	// the other nodes, and does not wait out its 3-minute timeout; a trace of another node goes on.
	worker2 := name + "-worker2"
	for _, pid := range []int{readInitPID(t, name, worker2), agentPID(t, name, worker2), readRecordPID(t, filepath.Join(e2etest.StateDir, name, "procs", "proxy-"+worker2+".json"))} {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	start = time.Now()
	out, err := k8sguide(t, "scale", "--name", name, "--replicas", "3")
	if err == nil || !strings.Contains(out, "deployment.apps/web scaled to 3") || !strings.Contains(err.Error(), "not checked on node "+worker2+": its init") {
		t.Errorf("scale with %s down: %v\n%s", worker2, err, out)
	}
	if took := time.Since(start); took > time.Minute {
		t.Errorf("scale with a node down took %s", took)
	}
	if out, err := k8sguide(t, "trace", "--name", name, "--node", worker, "--dst", addr); err != nil || !strings.Contains(out, "web") {
		t.Errorf("trace on %s with %s down: %v\n%s", worker, worker2, err, out)
	}

	// The control-plane node down for good: a trace reads the worker's kernel without the apiserver and says
	// that the names are missing; a command that needs the apiserver says which node is down, at once.
	for _, pid := range []int{readInitPID(t, name, cp), agentPID(t, name, cp), controlPlanePID(t, name)} {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	time.Sleep(500 * time.Millisecond)
	if out, err := k8sguide(t, "trace", "--name", name, "--node", worker, "--dst", addr); err != nil || !strings.Contains(out, "apiserver did not answer") {
		t.Errorf("trace with the control plane down: %v\n%s", err, out)
	}
	start = time.Now()
	if out, err := k8sguide(t, "scale", "--name", name, "--replicas", "1"); err == nil || !strings.Contains(err.Error(), "node "+cp+": its init") {
		t.Errorf("scale with the control plane down: %v\n%s", err, out)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("scale with the control plane down took %s to fail", took)
	}
}

// readInitPID is the pid of a node's init, from the lab's state.
func readInitPID(t *testing.T, labName, node string) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e2etest.StateDir, labName, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct{ InitPIDs map[string]int }
	if err := json.Unmarshal(data, &st); err != nil || st.InitPIDs[node] == 0 {
		t.Fatalf("state.json: no init for %s (%v)", node, err)
	}
	return st.InitPIDs[node]
}

func waitUntil(t *testing.T, what string, limit time.Duration, ok func() bool) {
	t.Helper()
	for start := time.Now(); !ok(); time.Sleep(100 * time.Millisecond) {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %s", what, limit)
		}
	}
}

// clientset is a client of the lab's apiserver through the lab's kubeconfig.
func clientset(t *testing.T, name string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", provider().KubeconfigPath(name))
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(cfg)
}

// TestLostState loses and turns a lab's state file as a crash or a clumsy user would: a state file that
// describes another lab makes down refuse, not remove that lab; a lab whose state file, or whole directory, is
// gone is found in the kernel by its namespaces' marks and removed whole (it was reported "Deleted" while every
// namespace and process stayed, and its etcd data and certificates were deleted under them).
func TestLostState(t *testing.T) {
	needRoot(t, "iptables-restore")
	// down without --name takes the only lab there is: the shared labs go first.
	e2etest.ReleaseSharedLabs(t)
	a, b := "e2e-lost", "e2e-other"
	upLab(t, a, "--workers", "0")
	upLab(t, b, "--workers", "0")
	statePath := func(name string) string { return filepath.Join(e2etest.StateDir, name, "state.json") }
	other, err := os.ReadFile(statePath(b))
	if err != nil {
		t.Fatal(err)
	}
	own, err := os.ReadFile(statePath(a))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(statePath(a), other, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := k8sguide(t, "down", "--name", a); err == nil || !strings.Contains(err.Error(), `describes lab "`+b+`"`) {
		t.Errorf("down with another lab's state: %v", err)
	}
	mustK8sguide(t, "kubectl", "--name", b, "get", "nodes")
	if err := os.WriteFile(statePath(a), own, 0o600); err != nil {
		t.Fatal(err)
	}

	// The state file lost.
	if err := os.Remove(statePath(a)); err != nil {
		t.Fatal(err)
	}
	if _, err := k8sguide(t, "deploy", "--name", a); err == nil || !strings.Contains(err.Error(), "k8sguide down --name "+a) {
		t.Errorf("deploy on a lab without its state: %v", err)
	}
	mustK8sguide(t, "down", "--name", a)
	assertNothingLeft(t, a)
	mustK8sguide(t, "kubectl", "--name", b, "get", "nodes")

	// The whole directory lost: the kernel still shows the lab (the only one, so down needs no --name), and
	// down removes it.
	if err := os.RemoveAll(filepath.Join(e2etest.StateDir, b)); err != nil {
		t.Fatal(err)
	}
	mustK8sguide(t, "down")
	assertNothingLeft(t, b)
}

// TestFullDisk: a lab's state on a full disk. up waited its whole 5 minutes while etcd panicked "no space left
// on device" in a loop, and never named the disk; now it refuses at once, names it and leaves nothing.
func TestFullDisk(t *testing.T) {
	needRoot(t, "iptables-restore")
	dir := filepath.Join(t.TempDir(), "state")
	os.MkdirAll(dir, 0o700)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m", "k8sguide-test-full", dir).CombinedOutput(); err != nil {
		t.Skipf("no tmpfs to fill: %v %s", err, out)
	}
	defer exec.Command("umount", dir).Run()
	name := "e2e-full"
	cmd := exec.Command(e2etest.Binary, "up", "--name", name, "--workers", "0")
	cmd.Env = append(os.Environ(), "K8SGUIDE_STATE_DIR="+dir)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	// Said by up's preflight (doctor's disk check, naming the state directory) or, past it, by Create (naming
	// the lab's own directory in it).
	if err == nil || !strings.Contains(string(out), "the disk holding the lab's state ("+dir) || !strings.Contains(string(out), ") is full") {
		t.Errorf("up on a full disk: %v\n%s", err, out)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("up on a full disk took %s to fail", took)
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("up left %v in the state directory", entries)
	}
	assertNothingLeft(t, name)
}
