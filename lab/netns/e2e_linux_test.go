package netns_test

import (
	"bytes"
	"context"
	"fmt"
	"html"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/ebpf/datapath"
	"github.com/k8sguide/k8sguide/dataplanes/ipvs"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/live"
	"github.com/k8sguide/k8sguide/internal/e2etest"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/netns"
	"github.com/k8sguide/k8sguide/lab/state"
	v1 "k8s.io/api/core/v1"
)

// These tests drive the real k8sguide binary, as a user would, against real namespaces, real kube-proxy rules
// and real connections. They need root and the iptables and nftables tools; without them they skip and say why.
// The helpers are shared with the trace tests (internal/e2etest).

func TestMain(m *testing.M) { os.Exit(e2etest.Main(m)) }

var (
	needRoot          = e2etest.NeedRoot
	toolFor           = e2etest.ToolFor
	k8sguide          = e2etest.K8sguide
	mustK8sguide      = e2etest.MustK8sguide
	provider          = e2etest.Provider
	upLab             = e2etest.UpLab
	assertNothingLeft = e2etest.AssertNothingLeft
	nodePortOf        = e2etest.NodePortOf
)

func TestEndToEnd(t *testing.T) {
	for _, d := range []dataplanes.Name{dataplanes.IPTables, dataplanes.NFTables, dataplanes.EBPF} {
		t.Run(string(d), func(t *testing.T) {
			needRoot(t, toolFor(d))
			if d == dataplanes.EBPF {
				e2etest.NeedEBPF(t)
			}
			testEndToEnd(t, d)
		})
	}
}

// testEndToEnd runs the guide's NodePort lab with the guide's own kubectl commands, then checks every node's
// NodePort from the client, the rules, trace --verify, and a scale-down. It runs on the package's shared lab of
// d, in a namespace of its own (guide: the guide's commands with -n guide), which goes at its end; the shared
// lab's own web Deployment and Service stay as they are.
func testEndToEnd(t *testing.T, d dataplanes.Name) {
	name := e2etest.SharedLab(t, d)
	const ns = "guide"
	kubectl := func(args ...string) string {
		return mustK8sguide(t, append([]string{"kubectl", "--name", name, "--", "-n", ns}, args...)...)
	}
	t.Cleanup(func() {
		if _, err := k8sguide(t, "kubectl", "--name", name, "--", "delete", "namespace", ns, "--ignore-not-found", "--wait", "--timeout=2m"); err != nil {
			t.Errorf("deleting namespace %s: %v", ns, err)
		}
	})
	kubectl("create", "namespace", ns)
	kubectl("create", "deployment", "web", "--image=nginx")
	kubectl("scale", "--replicas=3", "deployment/web")
	kubectl("expose", "deployment", "web", "--port=80", "--type=NodePort")
	kubectl("rollout", "status", "deployment/web", "--timeout=2m")
	port := kubectl("get", "svc", "web", "-o", "jsonpath={.spec.ports[0].nodePort}")
	if out := kubectl("get", "svc", "web"); !strings.Contains(out, "80:"+port+"/TCP") || !strings.Contains(out, "NodePort") {
		t.Errorf("kubectl get svc web does not show a NodePort 80:%s/TCP:\n%s", port, out)
	}
	ctx := context.Background()
	p := provider()
	// The guide's commands return before the dataplanes have the Service; wait for every node's kernel.
	if err := live.WaitServing(ctx, p, name, func(s *v1.Service) bool { return s.Namespace == ns && s.Name == "web" }, live.ServingTimeout); err != nil {
		t.Fatal(err)
	}
	status, err := p.Status(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := p.Workloads(ctx, name)
	allPods, _ := w.Pods(ctx)
	guidePods := func(all []v1.Pod) []v1.Pod {
		return slices.DeleteFunc(slices.Clone(all), func(p v1.Pod) bool { return p.Namespace != ns || p.Labels["app"] != "web" })
	}
	pods := guidePods(allPods)
	if len(pods) != 3 {
		t.Fatalf("%d pods, want 3", len(pods))
	}
	// get ep and get pods -o wide show the pods' addresses (and nodes) as on kind.
	ep, wide := kubectl("get", "ep"), kubectl("get", "pods", "-o", "wide")
	for _, pod := range pods {
		if !strings.Contains(ep, pod.Status.PodIP+":80") {
			t.Errorf("kubectl get ep does not list %s:80:\n%s", pod.Status.PodIP, ep)
		}
		if !regexp.MustCompile(regexp.QuoteMeta(pod.Name) + `\s+1/1\s+Running\s+0\s+\S+\s+` + regexp.QuoteMeta(pod.Status.PodIP) + `\s+` + regexp.QuoteMeta(pod.Spec.NodeName)).MatchString(wide) {
			t.Errorf("kubectl get pods -o wide does not show %s ready on %s at %s:\n%s", pod.Name, pod.Spec.NodeName, pod.Status.PodIP, wide)
		}
	}

	// 30 connections from the client to each node's NodePort: all answer, and all 3 pods answer overall.
	answered := map[string]int{}
	for _, n := range status.Nodes {
		addr := net.JoinHostPort(n.IP, port)
		pr := lab.ProbeAddr(ctx, p, name, addr, 30)
		if pr.Failures != 0 {
			t.Errorf("%s: %d of 30 connections failed: %s", addr, pr.Failures, pr.LastErr)
		}
		for pod, c := range pr.Answers {
			answered[pod] += c
		}
		// The pod sees the node's address: externalTrafficPolicy Cluster masquerades (SNAT) NodePort traffic.
		// Cilium does so only to send it to another node: a pod of the node itself sees the client.
		local := slices.ContainsFunc(pods, func(p v1.Pod) bool { return p.Spec.NodeName == n.Name })
		for src := range pr.Sources {
			if src == "172.18.0.1" && (d != dataplanes.EBPF || !local) {
				t.Errorf("%s: a pod saw the client's own address; NodePort traffic should be masqueraded", addr)
			}
		}
	}
	for _, pod := range pods {
		if answered[pod.Name] == 0 {
			t.Errorf("pod %s never answered (answers: %v)", pod.Name, answered)
		}
	}
	if d == dataplanes.EBPF {
		checkLBViews(t, name, status.Nodes[1].Name, kubectl("get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}"), pods)
		mustK8sguide(t, "lb", "list", "--name", name, "--node", status.Nodes[1].Name)
	}
	// What a student reads fits 100 columns (e2etest checks every line of these): the lab's objects and a
	// NodePort trace, whole and summarised.
	for _, what := range []string{"nodes", "pods", "services", "endpoints", "deployments"} {
		mustK8sguide(t, "get", what, "--name", name)
	}
	nodePortDst := net.JoinHostPort(status.Nodes[1].IP, port)
	mustK8sguide(t, "trace", "--name", name, "--dst", nodePortDst)
	if out := mustK8sguide(t, "trace", "--name", name, "--dst", nodePortDst, "--summary"); strings.Count(out, "\n") >= 10 {
		t.Errorf("trace --summary takes %d lines, want under 10:\n%s", strings.Count(out, "\n"), out)
	}
	// The picture, laid out by the k8sguide-graphviz beside k8sguide, names every pod the packet can reach.
	page := html.UnescapeString(mustK8sguide(t, "trace", "--name", name, "--dst", nodePortDst, "-o", "html"))
	if !strings.Contains(page, "<svg") {
		t.Errorf("trace -o html: no picture in the page:\n%.500s", page)
	}
	for _, pod := range pods {
		if !strings.Contains(page, "pod "+pod.Name) {
			t.Errorf("trace -o html: the picture has no box for pod %s", pod.Name)
		}
	}

	// The kernel's rules carry the Service's chains, named after it.
	for _, n := range status.Nodes {
		var rules string
		if d == dataplanes.EBPF {
			checkEBPFNode(t, name, n, allPods) // every pod of the node, the shared lab's own web's too
			continue
		}
		if d == dataplanes.NFTables {
			rules = mustK8sguide(t, "exec", "--name", name, n.Name, "--", "nft", "list", "table", "ip", "kube-proxy")
			for _, want := range []string{"service-", ns + "/web/tcp/", "external-", "endpoint-", "numgen random mod 3", "service-nodeports", port} {
				if !strings.Contains(rules, want) {
					t.Errorf("%s: nft ruleset lacks %q", n.Name, want)
				}
			}
		} else {
			rules = mustK8sguide(t, "exec", "--name", name, n.Name, "--", "iptables-save", "-t", "nat")
			for _, want := range []string{"KUBE-SVC-", "KUBE-SEP-", "KUBE-EXT-", `"` + ns + `/web"`, "--dport " + port, "statistic --mode random --probability 0.33333333349"} {
				if !strings.Contains(rules, want) {
					t.Errorf("%s: iptables-save lacks %q", n.Name, want)
				}
			}
		}
	}

	// Scale to one replica: only that pod answers, on every node. The pod bridges keep their MAC while
	// ports go (a pod's cached gateway MAC must stay right).
	if d == dataplanes.EBPF {
		mustK8sguide(t, "scale", "--name", name, "-n", ns, "--replicas", "1")
	} else {
		macs := bridgeMACs(t, status.Nodes)
		mustK8sguide(t, "scale", "--name", name, "-n", ns, "--replicas", "1")
		if after := bridgeMACs(t, status.Nodes); after != macs {
			t.Errorf("pod bridge MACs changed when pods went: before %s, after %s", macs, after)
		}
	}
	allPods, _ = w.Pods(ctx)
	if pods = guidePods(allPods); len(pods) != 1 {
		t.Fatalf("%d pods after scale --replicas 1", len(pods))
	}
	for _, n := range status.Nodes {
		pr := lab.ProbeAddr(ctx, p, name, net.JoinHostPort(n.IP, port), 10)
		if pr.Failures != 0 || len(pr.Answers) != 1 || pr.Answers[pods[0].Name] != 10 {
			t.Errorf("%s after scale to 1: answers %v, failures %d (%s), want only %s", n.Name, pr.Answers, pr.Failures, pr.LastErr, pods[0].Name)
		}
	}

	// The tracer agrees with the kernel on a packet to the NodePort.
	if out := mustK8sguide(t, "trace", "--name", name, "--node", status.Nodes[1].Name, "--dst", net.JoinHostPort(status.Nodes[1].IP, port), "--verify"); !regexp.MustCompile(`Verdict:\s+agree`).MatchString(out) {
		t.Errorf("trace --verify does not agree:\n%s", out)
	}
	checkNodePortCommand(t, name, ns, pods[0].Spec.NodeName)
	checkTraceNames(t, name, pods[0], status.Nodes)
}

// checkNodePortCommand checks `nodeport --check` with one replica, on node podNode: with externalTrafficPolicy
// Local the other nodes' failures are expected (exit 0, each said so); a Service whose targetPort nothing
// listens on fails unexpectedly everywhere (exit non-zero, the failures named).
func checkNodePortCommand(t *testing.T, name, ns, podNode string) {
	t.Helper()
	out := mustK8sguide(t, "nodeport", "--name", name, "-n", ns, "--service", "web-local", "--external-traffic-policy", "Local", "--check", "3")
	if n := strings.Count(out, "(expected)"); n != 2 {
		t.Errorf("nodeport with externalTrafficPolicy Local and one pod: %d nodes' failures said to be expected, want 2:\n%s", n, out)
	}
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(strings.TrimPrefix(podNode, name+"-")) + `\s+\S+\s+3/3\s`).MatchString(out) {
		t.Errorf("nodeport with externalTrafficPolicy Local: %s (the pod's node) does not answer 3/3:\n%s", podNode, out)
	}
	out, err := k8sguide(t, "nodeport", "--name", name, "-n", ns, "--service", "web-wrong-port", "--target-port", "8080", "--check", "2")
	if err == nil || !strings.Contains(err.Error(), "connections failed") {
		t.Errorf("nodeport to a targetPort nothing listens on: err %v, want the failed connections named:\n%s", err, out)
	}
}

// checkTraceNames checks how trace takes names: --from pod/NAME needs no --node (the pod's node is known) and
// refuses another node; --node takes the short name node-ip prints.
func checkTraceNames(t *testing.T, name string, pod v1.Pod, nodes []lab.Node) {
	t.Helper()
	clusterIP := mustK8sguide(t, "kubectl", "--name", name, "--", "-n", pod.Namespace, "get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}")
	from := "pod/" + pod.Namespace + "/" + pod.Name
	out := mustK8sguide(t, "trace", "--name", name, "--from", from, "--dst", clusterIP+":80", "--summary")
	if !regexp.MustCompile(`on\s+` + regexp.QuoteMeta(pod.Spec.NodeName) + `\s+\(`).MatchString(out) {
		t.Errorf("trace --from pod/%s does not walk its node %s:\n%s", pod.Name, pod.Spec.NodeName, out)
	}
	for _, n := range nodes {
		if n.Name == pod.Spec.NodeName {
			continue
		}
		if out, err := k8sguide(t, "trace", "--name", name, "--from", from, "--node", n.Name, "--dst", clusterIP+":80"); err == nil || !strings.Contains(err.Error(), "runs on "+pod.Spec.NodeName) {
			t.Errorf("trace --from %s --node %s (not its node): err %v\n%s", from, n.Name, err, out)
		}
		short := strings.TrimPrefix(n.Name, name+"-")
		if out := mustK8sguide(t, "trace", "--name", name, "--node", short, "--dst", n.IP+":1"); !strings.Contains(out, n.Name) {
			t.Errorf("trace --node %s does not walk %s:\n%s", short, n.Name, out)
		}
		break
	}
}

// checkEBPFNode checks that a Cilium node has its datapath on eth0, cilium_host and cilium_net, bpf_lxc on the
// veth of each of its pods (endpoints/ID/links, one per pod), its maps in the lab's bpffs, no pod bridge, and no
// kube-proxy rules.
func checkEBPFNode(t *testing.T, name string, n lab.Node, pods []v1.Pod) {
	t.Helper()
	dir := netns.NodeBPFFS(state.Default(), name, n.Name)
	for _, pin := range []string{"tc/globals/cilium_lb4_services_v2", "tc/globals/cilium_lb4_backends_v3", "tc/globals/cilium_lb4_reverse_nat",
		"tc/globals/cilium_ct4_global", "tc/globals/cilium_lxc", "links/eth0/cil_from_netdev", "links/eth0/cil_to_netdev",
		"links/cilium_host/cil_to_host", "links/cilium_host/cil_from_host", "links/cilium_net/cil_to_host",
		"cilium/socketlb/links/cgroup/cil_sock4_connect", "cilium/socketlb/links/cgroup/cil_sock4_sendmsg",
		"cilium/socketlb/links/cgroup/cil_sock4_recvmsg", "cilium/socketlb/links/cgroup/cil_sock_release"} {
		if _, err := os.Stat(filepath.Join(dir, pin)); err != nil {
			t.Errorf("%s: %v", n.Name, err)
		}
	}
	want := 0
	for _, p := range pods {
		if p.Spec.NodeName == n.Name {
			want++
		}
	}
	if eps, _ := filepath.Glob(filepath.Join(dir, "endpoints", "*", "links", "cil_from_container")); len(eps) != want {
		t.Errorf("%s: %d pod endpoints with cil_from_container attached (%v), want %d", n.Name, len(eps), eps, want)
	}
	if err := exec.Command("ip", "-n", n.Name, "link", "show", "cni0").Run(); err == nil {
		t.Errorf("%s runs Cilium's datapath but has a pod bridge cni0", n.Name)
	}
	if rules, err := exec.Command("ip", "netns", "exec", n.Name, "iptables-save").Output(); err == nil && strings.Contains(string(rules), "KUBE-") {
		t.Errorf("%s runs Cilium's datapath but has kube-proxy rules:\n%s", n.Name, rules)
	}
}

// checkLBViews checks what `lb services` and `lb socknat` show on an ebpf node: the web Service's ClusterIP with
// each pod as an active backend, and, while a connection the node opened to it is open, the socket LB's entry
// for it (gone once the socket is released).
func checkLBViews(t *testing.T, name, node, clusterIP string, pods []v1.Pod) {
	t.Helper()
	svcs := mustK8sguide(t, "lb", "services", "--name", name, "--node", node)
	if !regexp.MustCompile(`\d+\s+` + regexp.QuoteMeta(clusterIP) + `:80/TCP\s+ClusterIP\s+1 => `).MatchString(svcs) {
		t.Errorf("lb services does not list %s:80/TCP as a ClusterIP:\n%s", clusterIP, svcs)
	}
	for _, pod := range pods {
		if !strings.Contains(svcs, "=> "+pod.Status.PodIP+":80/TCP (active)") {
			t.Errorf("lb services does not list %s as an active backend:\n%s", pod.Status.PodIP, svcs)
		}
	}
	// bash's /dev/tcp holds the connection open for 4 s; connect() went through cil_sock4_connect.
	held := exec.Command(e2etest.Binary, "exec", "--name", name, node, "--", "bash", "-c", "exec 3<>/dev/tcp/"+clusterIP+"/80; sleep 4")
	if err := held.Start(); err != nil {
		t.Fatal(err)
	}
	want := "-> " + clusterIP + ":80 (revnat="
	var entries string
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if entries = mustK8sguide(t, "lb", "socknat", "--name", name, "--node", node); strings.Contains(entries, want) {
			break
		}
	}
	if !strings.Contains(entries, want) {
		t.Errorf("lb socknat shows no socket connected through %s:80 while one is open:\n%s", clusterIP, entries)
	}
	if err := held.Wait(); err != nil {
		t.Errorf("holding a connection to %s:80 from %s: %v", clusterIP, node, err)
	}
	if after := mustK8sguide(t, "lb", "socknat", "--name", name, "--node", node); strings.Contains(after, want) {
		t.Errorf("lb socknat still shows the entry after the socket was released (cil_sock_release deletes it):\n%s", after)
	}
}

// bridgeMACs lists each node's cni0 hardware address.
func bridgeMACs(t *testing.T, nodes []lab.Node) string {
	t.Helper()
	var macs []string
	for _, n := range nodes {
		out, err := exec.Command("ip", "-n", n.Name, "-br", "link", "show", "cni0").Output()
		if err != nil {
			t.Fatalf("%s: ip link show cni0: %v", n.Name, err)
		}
		f := strings.Fields(string(out))
		if len(f) < 3 {
			t.Fatalf("%s: unexpected ip link output %q", n.Name, out)
		}
		if !strings.HasPrefix(f[2], "0a:58:") {
			t.Errorf("%s: cni0 has no fixed (0a:58:…) address: %q", n.Name, out)
		}
		macs = append(macs, f[2])
	}
	return strings.Join(macs, ",")
}

func TestNodePortAllocation(t *testing.T) {
	needRoot(t, "iptables-restore")
	// The package's shared iptables lab (its web Service has a dynamic NodePort): the Services made here go at the
	// end.
	name := e2etest.SharedLab(t, dataplanes.IPTables)
	made := []string{"service/alloc", "service/alloc2", "service/alloc3"}
	for i := 0; i < 10; i++ {
		made = append(made, fmt.Sprintf("service/dyn%d", i))
	}
	e2etest.DeleteAtCleanup(t, name, made...)
	w, _ := provider().Workloads(context.Background(), name)
	before, _ := w.Services(context.Background())
	mustK8sguide(t, "nodeport", "--name", name, "--service", "alloc", "--node-port", "30009", "--check", "0")
	if got := nodePortOf(t, name, "alloc"); got != "30009" {
		t.Fatalf("explicit nodePort: got %s", got)
	}
	_, err := k8sguide(t, "nodeport", "--name", name, "--service", "alloc2", "--node-port", "30009")
	if err == nil || !strings.Contains(err.Error(), `Service "alloc2" is invalid: spec.ports[0].nodePort: Invalid value: 30009: provided port is already allocated`) {
		t.Errorf("collision: %v", err)
	}
	_, err = k8sguide(t, "nodeport", "--name", name, "--service", "alloc3", "--node-port", "32768")
	if err == nil || !strings.Contains(err.Error(), "provided port is not in the valid range. The range of valid ports is 30000-32767") {
		t.Errorf("out of range: %v", err)
	}
	for i := 0; i < 10; i++ {
		svc := fmt.Sprintf("dyn%d", i)
		mustK8sguide(t, "nodeport", "--name", name, "--service", svc, "--check", "0")
		if np, _ := strconv.Atoi(nodePortOf(t, name, svc)); np < 30086 {
			t.Errorf("dynamic nodePort %d is in the static band 30000-30085", np)
		}
	}
	// Refused Services left nothing: they are not in the lab (the 11 made, beside what was there).
	svcs, _ := w.Services(context.Background())
	if len(svcs) != len(before)+11 {
		t.Errorf("%d services, want %d", len(svcs), len(before)+11)
	}
}

func TestNodePortAddresses(t *testing.T) {
	for _, d := range []dataplanes.Name{dataplanes.IPTables, dataplanes.NFTables} {
		t.Run(string(d), func(t *testing.T) {
			needRoot(t, toolFor(d), "curl")
			// Serve NodePorts only on the pod-bridge addresses (10.244.0.0/16): the node network address must not answer,
			// and trace --verify must say both. A lab's shape (kube-proxy's flag, fixed at up): a lab of its own.
			name := "e2e-npa" + string(d)[:1]
			upLab(t, name, "--dataplane", string(d), "--workers", "1", "--nodeport-addresses", "10.244.0.0/16")
			mustK8sguide(t, "deploy", "--name", name, "--replicas", "1")
			mustK8sguide(t, "nodeport", "--name", name, "--check", "0")
			port := nodePortOf(t, name, "web")
			ctx := context.Background()
			p := provider()
			// Inside the CIDR: the worker's cni0 address, reached from the control-plane node (which routes
			// the worker's pod CIDR to it).
			inside := net.JoinHostPort(e2etest.BridgeIP(t, name, name+"-worker"), port)
			var out bytes.Buffer
			err := p.Exec(ctx, name, name+"-control-plane", []string{"curl", "-s", "-m", "3", "-o", "/dev/null", "-w", "%{http_code}", "http://" + inside + "/"}, lab.Streams{Out: &out, Err: &out})
			if err != nil || out.String() != "200" {
				t.Errorf("NodePort on %s (inside --nodeport-addresses): %v %q", inside, err, out.String())
			}
			// Outside the CIDR: the worker's node-network address.
			outside := net.JoinHostPort("172.18.0.3", port)
			if pr := lab.ProbeAddr(ctx, p, name, outside, 3); pr.Failures != 3 {
				t.Errorf("NodePort on %s (outside --nodeport-addresses) answered: %v", outside, pr.Answers)
			}
			// The trace says both, and the kernel agrees: from the client to the node's address nothing
			// translates the packet (local); from the worker's pod to its node's bridge address, the NodePort
			// takes it (delivered, back to the pod itself: a hairpin).
			if v := verifiedVerdict(t, name, "--dst", outside); v != trace.Local {
				t.Errorf("trace to %s (outside --nodeport-addresses): %s, want local", outside, v)
			}
			pod := webPodOn(t, name, name+"-worker")
			if v := verifiedVerdict(t, name, "--node", name+"-worker", "--from", "pod/"+pod, "--dst", inside); v != trace.Delivered {
				t.Errorf("trace from pod/%s to %s (inside --nodeport-addresses): %s, want delivered", pod, inside, v)
			}
		})
	}
	// primary: kube-proxy's server resolves it to the node's own address (-d NODEIP/32 in iptables, the
	// nodeport-ips set in nftables); nftables mode does so when the flag is not given at all (upstream's
	// default for that mode).
	for _, tc := range []struct {
		d     dataplanes.Name
		flags []string
		want  func(node lab.Node) []string
	}{
		{dataplanes.IPTables, []string{"--nodeport-addresses", "primary"}, func(n lab.Node) []string {
			return []string{"-A KUBE-SERVICES -d " + n.IP + "/32 -m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\" -j KUBE-NODEPORTS"}
		}},
		{dataplanes.NFTables, nil, func(n lab.Node) []string {
			return []string{"set nodeport-ips", "elements = { " + n.IP + " }", "ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports"}
		}},
	} {
		t.Run(string(tc.d)+"-primary", func(t *testing.T) {
			needRoot(t, toolFor(tc.d))
			var name string
			if tc.flags == nil {
				// nftables's default: the package's shared lab, which this only reads.
				name = e2etest.SharedLab(t, tc.d)
			} else {
				// --nodeport-addresses is a lab's shape (kube-proxy's flag, fixed at up): a lab of its own.
				name = "e2e-npp" + string(tc.d)[:1]
				upLab(t, name, append([]string{"--dataplane", string(tc.d), "--workers", "1"}, tc.flags...)...)
				mustK8sguide(t, "deploy", "--name", name, "--replicas", "1")
				mustK8sguide(t, "nodeport", "--name", name, "--check", "0")
			}
			port := nodePortOf(t, name, "web")
			status, err := provider().Status(context.Background(), name)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range status.Nodes {
				argv := []string{"iptables-save", "-t", "nat"}
				if tc.d == dataplanes.NFTables {
					argv = []string{"nft", "list", "table", "ip", "kube-proxy"}
				}
				rules := mustK8sguide(t, append([]string{"exec", "--name", name, n.Name, "--"}, argv...)...)
				for _, want := range tc.want(n) {
					if !strings.Contains(rules, want) {
						t.Errorf("%s: the rules lack %q:\n%s", n.Name, want, rules)
					}
				}
				// The node's address answers; its pod bridge's (another local address) does not.
				if pr := lab.ProbeAddr(context.Background(), provider(), name, net.JoinHostPort(n.IP, port), 3); pr.Failures != 0 {
					t.Errorf("NodePort on %s:%s: %s", n.IP, port, pr.LastErr)
				}
			}
			cni := e2etest.BridgeIP(t, name, status.Nodes[1].Name)
			var out bytes.Buffer
			err = provider().Exec(context.Background(), name, status.Nodes[0].Name, []string{"curl", "-s", "-m", "2", "http://" + net.JoinHostPort(cni, port) + "/"}, lab.Streams{Out: &out, Err: &out})
			if err == nil {
				t.Errorf("NodePort on %s (a pod bridge, not the primary address) answered", cni)
			}
		})
	}
}

// webPodOn is a ready pod of web on node.
func webPodOn(t *testing.T, name, node string) string {
	t.Helper()
	w, err := provider().Workloads(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := w.Pods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if p.Labels["app"] == "web" && p.Spec.NodeName == node && p.Status.PodIP != "" {
			return p.Name
		}
	}
	t.Fatalf("no pod of web on %s", node)
	return ""
}

// verifiedVerdict runs trace --verify and returns the verdict of the path the kernel took; it fails the test
// when the kernel did not agree with the prediction.
func verifiedVerdict(t *testing.T, name string, args ...string) string {
	t.Helper()
	v := e2etest.Verify(t, name, args...)
	if v.Result != "agree" || v.Path < 0 {
		t.Errorf("trace --verify %v: the kernel did not agree: %v", args, v.Reasons)
		return ""
	}
	return v.Prediction.Paths[v.Path].Verdict
}

func TestBadInput(t *testing.T) {
	needRoot(t, "iptables-restore")
	// The package's shared iptables lab: bad input changes nothing (which SharedLab checks at the end).
	name := e2etest.SharedLab(t, dataplanes.IPTables)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"up", "--name", name}, `lab "` + name + `" already exists`},
		// This kernel has no IPVS: one line that says so and names the ways to get it; nothing is made.
		{args: []string{"up", "--name", "e2e-bad2", "--dataplane", "ipvs"},
			want: "dataplane ipvs: this kernel has no IPVS (no /proc/sys/net/ipv4/vs); use --provider kind on a host whose kernel has IPVS, or the project's IPVS test VM"},
		{[]string{"down", "--name", "e2e-nosuchlab"}, `no lab named "e2e-nosuchlab"`},
		{[]string{"exec", "--name", name, name + "-worker9", "--", "true"}, `no node or pod named "` + name + `-worker9"`},
		{[]string{"up", "--name", "e2e-bad2", "--dataplane", "bogus"}, `unknown dataplane "bogus"`},
		{[]string{"up", "--name", "e2e-bad2", "--nodeport-addresses", "10.0.0.0/33"}, "is not a CIDR"},
		{[]string{"up", "--name", "e2e-bad2", "--service-node-port-range", "40000-30000"}, "invalid --service-node-port-range"},
		{[]string{"up", "--name", "Bad_Name"}, "invalid lab name"},
		{[]string{"scale", "--name", name, "--deployment", "nope", "--replicas", "2"}, `deployments.apps "nope" not found`},
		{[]string{"up", "--name", "e2e-bad2", "--lb-algorithm", "maglev"}, "needs --dataplane ebpf"},
		{[]string{"up", "--name", "e2e-bad2", "--dataplane", "ebpf", "--nodeport-addresses", "172.18.0.0/16"}, "--nodeport-addresses is kube-proxy's"},
		{[]string{"up", "--name", "e2e-bad2", "--dataplane", "ebpf", "--lb-algorithm", "roundrobin"}, `--lb-algorithm "roundrobin"`},
		{[]string{"lb", "list", "--bpffs", os.TempDir()}, "is not on a bpf filesystem"},
		{[]string{"lb", "list", "--name", name}, "has no Cilium maps"},
		// A machine whose only clang is bookworm's 14: up says which package to install, and makes nothing.
		{[]string{"up", "--name", "e2e-bad2", "--dataplane", "ebpf"}, "install the clang-19 package"},
	} {
		if slices.Contains(tc.args, "ipvs") && ipvs.CheckKernel() == nil {
			continue // this kernel has IPVS: the ipvs e2e tests run the dataplane instead
		}
		cmd := exec.Command(e2etest.Binary, tc.args...)
		if slices.Contains(tc.args, "ebpf") {
			cmd.Env = append(os.Environ(), "PATH="+oldClangPath(t))
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		if err == nil || len(lines) != 1 || !strings.HasPrefix(lines[0], "ERROR: ") || !strings.Contains(lines[0], tc.want) {
			t.Errorf("k8sguide %s: exit %v, stderr %q; want one ERROR line containing %q", strings.Join(tc.args, " "), err, stderr.String(), tc.want)
		}
	}
	assertNothingLeft(t, "e2e-bad2")
	// exec passes on the command's exit status.
	err := exec.Command(e2etest.Binary, "exec", "--name", name, name+"-control-plane", "--", "sh", "-c", "exit 7").Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 {
		t.Errorf("exec exit status: %v, want 7", err)
	}
	// Not root: one clear line, nothing made.
	cmd := exec.Command(e2etest.Binary, "up", "--name", "e2e-bad3")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), "needs root") || strings.Count(stderr.String(), "\n") != 1 {
		t.Errorf("up as nobody: %v %q", err, stderr.String())
	}
	assertNothingLeft(t, "e2e-bad3")
}

// TestSharedLabNoticesChanges is the shared-lab fixture's own test, on the package's iptables lab: a Service left
// behind and web scaled are what it finds changed (a test that left them would fail); once the Service is deleted
// and web scaled back, it finds nothing.
func TestSharedLabNoticesChanges(t *testing.T) {
	needRoot(t, "iptables-restore")
	name := e2etest.SharedLab(t, dataplanes.IPTables)
	if c := e2etest.SharedLabChanges(t, name, 0); c != "" {
		t.Fatalf("the fixture finds changes before the test made any:\n%s", c)
	}
	e2etest.DeleteAtCleanup(t, name, "service/left-behind")
	e2etest.ScaleBackAtCleanup(t, name)
	mustK8sguide(t, "nodeport", "--name", name, "--service", "left-behind", "--check", "0")
	mustK8sguide(t, "scale", "--name", name, "--replicas", "2")
	c := e2etest.SharedLabChanges(t, name, 0)
	for _, want := range []string{"+ service default/left-behind NodePort", "- deployment default/web replicas 3", "+ deployment default/web replicas 2"} {
		if !strings.Contains(c, want) {
			t.Errorf("the fixture's changes lack %q:\n%s", want, c)
		}
	}
	e2etest.Delete(t, name, "service/left-behind")
	mustK8sguide(t, "scale", "--name", name, "--replicas", "3")
	if c := e2etest.SharedLabChanges(t, name, time.Minute); c != "" {
		t.Errorf("the fixture finds changes after the test put the lab back:\n%s", c)
	}
}

// oldClangPath is a PATH holding iproute2's ip, util-linux's nsenter and a clang that says it is Debian bookworm's 14.0.6.
func oldClangPath(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, tool := range []string{"ip", "nsenter"} {
		path, err := exec.LookPath(tool)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(path, filepath.Join(dir, tool)); err != nil {
			t.Fatal(err)
		}
	}
	clang := "#!/bin/sh\necho 'Debian clang version 14.0.6'\n"
	if err := os.WriteFile(filepath.Join(dir, "clang"), []byte(clang), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestInterruptedUpLeavesNothing sends SIGINT while `up` runs: everything made so far must be removed.
func TestInterruptedUpLeavesNothing(t *testing.T) {
	needRoot(t, "iptables-restore")
	name := "e2e-int"
	defer assertNothingLeft(t, name)
	type run struct {
		delay time.Duration
		args  []string
	}
	// During the namespaces, the certificates, the control plane's start and the nodes' joining (up takes
	// about 4 s).
	runs := []run{{50 * time.Millisecond, nil}, {150 * time.Millisecond, nil}, {1200 * time.Millisecond, nil},
		{2500 * time.Millisecond, nil}, {3500 * time.Millisecond, nil}}
	if _, err := datapath.FindClang(); err == nil {
		// ebpf: during the compile, the load and attach, which follow the control plane (with the objects
		// cached, up takes about 5 s).
		e2etest.NeedEBPF(t)
		for _, d := range []time.Duration{4200, 4800, 5500} {
			runs = append(runs, run{d * time.Millisecond, []string{"--dataplane", "ebpf"}})
		}
	} else {
		t.Logf("ebpf interruptions not tried: %v", err)
	}
	for _, r := range runs {
		delay := r.delay
		cmd := exec.Command(e2etest.Binary, append([]string{"up", "--name", name}, r.args...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(delay)
		cmd.Process.Signal(os.Interrupt)
		err := cmd.Wait()
		t.Logf("up %v interrupted after %v: %v\n%s", r.args, delay, err, out.Bytes())
		if err == nil {
			// It finished before the signal: tear it down normally.
			mustK8sguide(t, "down", "--name", name)
		}
		assertNothingLeft(t, name)
		// Nor logs kept for the user: an interruption is not a failure to explain (TMPDIR is the run's own).
		if kept, _ := filepath.Glob(filepath.Join(os.TempDir(), "k8sguide-failed-up-*")); len(kept) > 0 {
			t.Errorf("up interrupted after %v kept logs in %v", delay, kept)
			for _, k := range kept {
				os.RemoveAll(k)
			}
		}
	}
}
