package netns_test

import (
	"context"
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
	pidPath := filepath.Join(e2etest.StateDir, name, "proxy-"+worker.Name+".pid")
	pid := readPID(t, pidPath)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	mustK8sguide(t, "exec", "--name", name, worker.Name, "--", "iptables", "-t", "nat", "-F")
	took := waitFor("the NodePort answers again after kube-proxy was killed", 10*time.Second, answers)
	if readPID(t, pidPath) == pid {
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

func readPID(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
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
