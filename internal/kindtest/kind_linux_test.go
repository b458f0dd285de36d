package kindtest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/k8sguide/k8sguide/dataplanes"
)

var env *Env

func TestMain(m *testing.M) {
	e, skip, cleanup, err := Setup()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if skip != "" {
		skipReason = skip
	}
	env = e
	code := m.Run()
	cleanup()
	os.Exit(code)
}

var skipReason string

func need(t *testing.T) *Env {
	t.Helper()
	if env == nil {
		t.Skip(skipReason)
	}
	return env
}

// TestKind drives a 3-node kind lab per dataplane as the guide does, with the root network namespace checked
// untouched across the whole run.
func TestKind(t *testing.T) {
	e := need(t)
	before, kernel := RootState(), KernelSettings()
	for _, d := range kindDataplanes() {
		t.Run(string(d), func(t *testing.T) { testLab(t, e, d) })
		if d == dataplanes.EBPF {
			t.Run("ebpf-maglev", func(t *testing.T) { testMaglev(t, e) })
		}
	}
	if after := RootState(); after != before {
		t.Errorf("the root network namespace changed across the kind run:\n%s", diff(before, after))
	}
	// kubelet sets these host-wide at its start (pkg/kubelet/cm, as on any kind host); the private engine puts
	// them back when it stops (make kind-engine-stop).
	t.Logf("host-wide kernel settings before the run:\n%s\nafter:\n%s", kernel, KernelSettings())
}

// kindDataplanes are the dataplanes TestKind runs: $K8SGUIDE_KIND_DATAPLANES (comma-separated), else iptables,
// nftables and ebpf (Cilium built from its source: make cilium-images first, as make test-kind does).
func kindDataplanes() []dataplanes.Name {
	list := os.Getenv("K8SGUIDE_KIND_DATAPLANES")
	if list == "" {
		list = "iptables,nftables,ebpf"
	}
	var ds []dataplanes.Name
	for _, d := range strings.Split(list, ",") {
		ds = append(ds, dataplanes.Name(strings.TrimSpace(d)))
	}
	return ds
}

func testLab(t *testing.T, e *Env, d dataplanes.Name) {
	name := "kt-" + string(d)[:3]
	volumes := e.Volumes()
	t.Cleanup(func() {
		if t.Failed() && os.Getenv("K8SGUIDE_KIND_KEEP") != "" {
			return
		}
		e.Run(t, "down", "--name", name)
	})
	up := []string{"up", "--provider", "kind", "--name", name, "--dataplane", string(d), "--image", e.Image}
	if d != dataplanes.IPTables {
		// A kubeconfig of the user's choice, not $KUBECONFIG's: down must find it without the flag.
		up = append(up, "--kubeconfig", filepath.Join(e.Dir, "kubeconfig-"+name))
	}
	e.MustRun(t, up...)

	// The scenario matrix's kind slice, on the lab before anything is on it: scenario run --lab puts it back as
	// it found it after each lesson.
	lessons(t, e, name, "nodeport", "local-traffic")

	// One replica first: the workers but one have no pod of web, and must forward the NodePort to it (a node
	// whose IPv4 forwarding was off dropped it: the 3-node nodeport failure).
	e.MustRun(t, "deploy", "--name", name, "--replicas", "1")
	out := e.MustRun(t, "nodeport", "--name", name, "--check", "5")
	nodes := nodeAddrs(t, e, name)
	for _, n := range nodes {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(shortName(name, n.name)) + `\s+\S+\s+5/5\s`).MatchString(out) {
			t.Errorf("nodeport with one replica: node %s did not answer 5 of 5:\n%s", n.name, out)
		}
	}
	e.MustRun(t, "scale", "--name", name, "--replicas", "3")
	port := nodePort(t, e, name)

	// Every node's NodePort from the client, and from every node to every node's address.
	for _, to := range nodes {
		out, err := e.Run(t, "connect", "--name", name, "--count", "10", to.ip+":"+port)
		if err != nil || !strings.Contains(out, "10 of 10 connections") {
			t.Errorf("from the client to %s:%s: %v", to.ip, port, err)
		}
	}
	for _, from := range nodes {
		for _, to := range nodes {
			out, err := e.Run(t, "connect", "--name", name, "--from", "node", "--node", from.name, "--count", "3", to.ip+":"+port)
			if err != nil || !strings.Contains(out, "3 of 3 connections") {
				t.Errorf("from node %s to %s:%s: %v", from.name, to.ip, port, err)
			}
		}
	}

	// trace --verify on every node: from the client, from the node itself, and from a pod (the ClusterIP, and the
	// NodePort of another node).
	pod, podNode := aPod(t, e, name)
	clusterIP := strings.TrimSpace(e.MustRun(t, "kubectl", "--name", name, "--", "get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}"))
	for _, n := range nodes {
		verify(t, e, "trace", "--name", name, "--node", n.name, "--service", "web", "--verify")
		verify(t, e, "trace", "--name", name, "--node", n.name, "--service", "web", "--from", "node", "--verify")
		if n.name != podNode {
			verify(t, e, "trace", "--name", name, "--dst", n.ip+":"+port, "--from", "pod/"+pod, "--verify")
			if d != dataplanes.EBPF {
				// (On ebpf the socket LB translates the pod's connect() to the backend itself: no second node's
				// rules to walk on; verify has compared the source the pod saw.)
				walkOn(t, e, name, pod, n.ip+":"+port)
			}
		}
	}
	verify(t, e, "trace", "--name", name, "--dst", clusterIP+":80", "--from", "pod/"+pod, "--verify")

	// The reading commands.
	if out := e.MustRun(t, "get", "nodes", "--name", name); strings.Count(out, string(d)) < 3 {
		t.Errorf("get nodes does not show the dataplane on 3 nodes:\n%s", out)
	}
	if out := e.MustRun(t, "get", "endpoints", "--name", name); !strings.Contains(out, "web") {
		t.Errorf("get endpoints lacks web:\n%s", out)
	}
	if out := e.MustRun(t, "exec", "--name", name, nodes[1].name, "--", "cat", "/proc/sys/net/ipv4/ip_forward"); strings.TrimSpace(out) != "1" {
		t.Errorf("exec on %s: ip_forward %q", nodes[1].name, out)
	}
	if out := e.MustRun(t, "exec", "--name", name, "pod/"+pod, "--", "cat", "/proc/net/fib_trie"); !strings.Contains(out, "10.244.") {
		t.Errorf("exec in pod %s does not see the pod network", pod)
	}
	if d == dataplanes.EBPF {
		// Cilium's own maps on a node, as cilium-dbg reads them.
		for _, what := range []string{"list", "services", "endpoints", "ct", "socknat"} {
			out, err := e.Run(t, "lb", what, "--name", name, "--node", podNode)
			if err != nil {
				t.Errorf("lb %s: %v", what, err)
			} else if what == "services" && !strings.Contains(out, clusterIP+":80") {
				t.Errorf("lb services does not list web's ClusterIP %s:\n%s", clusterIP, out)
			}
		}
	} else if _, err := e.Run(t, "lb", "list", "--name", name); err == nil {
		t.Errorf("lb list on a %s lab succeeded: it reads Cilium's maps", d)
	} else if strings.Contains(strings.TrimSpace(err.Error()), "\n") {
		t.Errorf("lb list on a %s lab: more than one line: %v", d, err)
	}

	// snapshot, then the same packet traced offline from it: the same endpoints as the live trace.
	snap := e.Dir + "/" + name + ".json"
	e.MustRun(t, "snapshot", "--name", name, "--node", nodes[2].name, "-o", snap)
	offline := e.MustRun(t, "trace", "--snapshot", snap, "--dst", nodes[2].ip+":"+port, "-o", "json")
	live := e.MustRun(t, "trace", "--name", name, "--node", nodes[2].name, "--service", "web", "-o", "json")
	if a, b := endpoints(t, offline), endpoints(t, live); a != b || a == "" {
		t.Errorf("offline trace of the snapshot reaches %q, the live trace %q", a, b)
	}

	// compare: the same manifests on a netns lab of the same dataplane, stage by stage.
	netnsLab := "kn-" + string(d)[:3]
	t.Cleanup(func() { e.Run(t, "down", "--name", netnsLab) })
	e.MustRun(t, "up", "--provider", "netns", "--name", netnsLab, "--dataplane", string(d))
	e.MustRun(t, "deploy", "--name", netnsLab)
	e.MustRun(t, "nodeport", "--name", netnsLab, "--check", "0")
	out = e.MustRun(t, "compare", "--name", name, "--name", netnsLab, "--service", "web")
	if strings.Count(out, "delivered") < 2 {
		t.Errorf("compare does not deliver on both labs:\n%s", out)
	}
	e.MustRun(t, "down", "--name", netnsLab)

	// No endpoints: the node rejects the packet, and verify sees the rejection. (On ebpf, real Cilium's ICMP
	// reply reaches the client's interface but not its connection, which times out: verify says so.)
	e.MustRun(t, "scale", "--name", name, "--replicas", "0")
	for _, n := range nodes[:1] {
		out, err := e.Run(t, "trace", "--name", name, "--node", n.name, "--dst", n.ip+":"+port, "--verify")
		if err != nil || !regexp.MustCompile(`(?m)^Verdict:\s+agree`).MatchString(out) || !strings.Contains(out, "rejected") {
			t.Errorf("no endpoints, on %s: the kernel did not agree on a rejection (%v):\n%s", n.name, err, out)
		}
		if d == dataplanes.EBPF && !strings.Contains(out, "ICMP port unreachable from "+n.ip) {
			t.Errorf("no endpoints, on %s: verify does not show Cilium's ICMP reply arriving:\n%s", n.name, out)
		}
	}

	e.MustRun(t, "down", "--name", name)
	if left := e.Leftovers(name, volumes); len(left) > 0 {
		t.Errorf("down left %s", strings.Join(left, "; "))
	}
}

// testMaglev runs Cilium with Maglev on a kind lab of its own (the LB algorithm is the agent's, chosen at up):
// the maglev lesson, then trace --verify on every node from the client, the node and a pod, each predicting the
// one backend the flow's hash picks, and the kernel's choice compared with it.
func testMaglev(t *testing.T, e *Env) {
	name := "kt-mag"
	volumes := e.Volumes()
	t.Cleanup(func() {
		if t.Failed() && os.Getenv("K8SGUIDE_KIND_KEEP") != "" {
			return
		}
		e.Run(t, "down", "--name", name)
	})
	e.MustRun(t, "up", "--provider", "kind", "--name", name, "--dataplane", string(dataplanes.EBPF), "--image", e.Image, "--lb-algorithm", "maglev")
	lessons(t, e, name, "maglev")
	e.MustRun(t, "deploy", "--name", name)
	e.MustRun(t, "nodeport", "--name", name, "--check", "0")
	port := nodePort(t, e, name)
	pod, podNode := aPod(t, e, name)
	for _, n := range nodeAddrs(t, e, name) {
		verify(t, e, "trace", "--name", name, "--node", n.name, "--service", "web", "--verify")
		verify(t, e, "trace", "--name", name, "--node", n.name, "--service", "web", "--from", "node", "--verify")
		if n.name != podNode {
			verify(t, e, "trace", "--name", name, "--dst", n.ip+":"+port, "--from", "pod/"+pod, "--verify")
		}
	}
	e.MustRun(t, "down", "--name", name)
	if left := e.Leftovers(name, volumes); len(left) > 0 {
		t.Errorf("down left %s", strings.Join(left, "; "))
	}
}

// lessons runs shipped lessons on the lab with scenario run --lab: every check must pass, and the lab must be
// left as it was (the runner checks that itself, and fails the cell when it is not).
func lessons(t *testing.T, e *Env, name string, names ...string) {
	t.Helper()
	out, err := e.Run(t, append(append([]string{"scenario", "run"}, names...), "--lab", name, "-o", "json")...)
	var r struct {
		Cells []struct {
			Scenario, Status, Error string
			Checks                  []struct{ Title, Status, Error string }
		}
	}
	if jerr := json.Unmarshal([]byte(out), &r); jerr != nil {
		t.Fatalf("scenario run %v --lab %s: %v (%v)\n%s", names, name, err, jerr, out)
	}
	if err != nil || len(r.Cells) != len(names) {
		t.Errorf("scenario run %v --lab %s: %v, %d cells", names, name, err, len(r.Cells))
	}
	for _, c := range r.Cells {
		if c.Status != "pass" {
			t.Errorf("lesson %s on lab %s: %s %s", c.Scenario, name, c.Status, c.Error)
		}
		for _, ch := range c.Checks {
			if ch.Status != "pass" {
				t.Errorf("lesson %s, check %q: %s %s", c.Scenario, ch.Title, ch.Status, ch.Error)
			}
		}
	}
}

// TestKindInterruptedUp interrupts up once kind has made the nodes: nothing of the lab may be left.
func TestKindInterruptedUp(t *testing.T) {
	e := need(t)
	name := "kt-int"
	volumes := e.Volumes()
	cmd := e.Command(t.Context(), "up", "--provider", "kind", "--name", name, "--image", e.Image)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		if names, _ := e.Docker("ps", "-a", "--filter", "label=io.x-k8s.kind.cluster="+name, "--format", "{{.Names}}"); strings.TrimSpace(names) != "" {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // into kubeadm's work on the nodes
	syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
	err := cmd.Wait()
	t.Logf("$ k8sguide up --name %s (interrupted)\n%s", name, out.String())
	if err == nil {
		t.Errorf("an interrupted up exited 0")
	}
	if left := e.Leftovers(name, volumes); len(left) > 0 {
		t.Errorf("an interrupted up left %s", strings.Join(left, "; "))
		e.Run(t, "down", "--name", name)
	}
}

type node struct{ name, ip string }

func nodeAddrs(t *testing.T, e *Env, lab string) []node {
	out := e.MustRun(t, "kubectl", "--name", lab, "--", "get", "nodes", "-o",
		`jsonpath={range .items[*]}{.metadata.name} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}`)
	var ns []node
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			ns = append(ns, node{f[0], f[1]})
		}
	}
	if len(ns) != 3 {
		t.Fatalf("want 3 nodes, got %v", ns)
	}
	return ns
}

// shortName is a node's name as nodeport's table prints it (the lab's name cut off: control-plane, worker, ...).
func shortName(lab, node string) string { return strings.TrimPrefix(node, lab+"-") }

func nodePort(t *testing.T, e *Env, lab string) string {
	out := strings.TrimSpace(e.MustRun(t, "kubectl", "--name", lab, "--", "get", "svc", "web", "-o", "jsonpath={.spec.ports[0].nodePort}"))
	if _, err := strconv.Atoi(out); err != nil {
		t.Fatalf("web's NodePort: %q", out)
	}
	return out
}

func aPod(t *testing.T, e *Env, lab string) (pod, node string) {
	out := strings.TrimSpace(e.MustRun(t, "kubectl", "--name", lab, "--", "get", "pods", "-l", "app=web", "-o",
		`jsonpath={.items[0].metadata.name} {.items[0].spec.nodeName}`))
	f := strings.Fields(out)
	if len(f) != 2 {
		t.Fatalf("web's pods: %q", out)
	}
	return f[0], f[1]
}

// verify runs a trace --verify and checks that the kernel agreed.
func verify(t *testing.T, e *Env, args ...string) {
	t.Helper()
	out, err := e.Run(t, args...)
	if err != nil || !regexp.MustCompile(`(?m)^Verdict:\s+agree`).MatchString(out) {
		t.Errorf("%s: the kernel did not agree (%v)", strings.Join(args, " "), err)
	}
}

// walkOn follows a pod's packet to another node's NodePort as the trace's note says (the pod's node only
// masquerades it; the other node's rules translate it) and checks the source that walk predicts for each
// endpoint against the source real connections from the pod showed that endpoint's pod.
func walkOn(t *testing.T, e *Env, name, pod, dst string) {
	t.Helper()
	out := e.MustRun(t, "trace", "--name", name, "--dst", dst, "--from", "pod/"+pod, "-o", "json")
	m := regexp.MustCompile(`walk on with --node (\S+) --src (\S+)\)`).FindStringSubmatch(out)
	if m == nil {
		t.Errorf("trace from pod/%s to %s names no node to walk on:\n%s", pod, dst, out)
		return
	}
	var tr struct {
		Paths []struct {
			Endpoint *struct {
				Pod string `json:"pod"`
			} `json:"endpoint"`
			SNAT string `json:"snat"`
		} `json:"paths"`
	}
	if err := json.Unmarshal([]byte(e.MustRun(t, "trace", "--name", name, "--node", m[1], "--src", m[2], "--dst", dst, "-o", "json")), &tr); err != nil {
		t.Fatalf("trace -o json: %v", err)
	}
	sees := map[string]string{} // pod name → the source the walk says it sees
	for _, p := range tr.Paths {
		if p.Endpoint != nil {
			_, podName, _ := strings.Cut(p.Endpoint.Pod, "/")
			sees[podName] = p.SNAT
		}
	}
	seen := e.MustRun(t, "connect", "--name", name, "--from", "pod/"+pod, "--count", "3", dst)
	_, table, _ := strings.Cut(seen, "SOURCE THE POD SAW")
	addr := regexp.MustCompile(`\b(\d+\.\d+\.\d+\.\d+)×\d+`)
	checked := 0
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		want, ok := sees[f[0]]
		if !ok {
			t.Errorf("walked on at %s: pod %s answered, which the walk does not reach (%v)", m[1], f[0], sees)
			continue
		}
		for _, a := range addr.FindAllStringSubmatch(line, -1) {
			checked++
			if a[1] != want {
				t.Errorf("walked on at %s, pod %s sees %s; a real connection from pod/%s showed it %s", m[1], f[0], want, pod, a[1])
			}
		}
	}
	if checked == 0 {
		t.Errorf("walked on at %s: no connection's source to compare:\n%s", m[1], seen)
	}
}

// endpoints are the endpoints a trace's JSON reaches, with their chances, in order.
func endpoints(t *testing.T, js string) string {
	var tr struct {
		Endpoints []struct {
			IP          string  `json:"ip"`
			Port        int     `json:"port"`
			Probability float64 `json:"probability"`
		} `json:"endpoints"`
	}
	if err := json.Unmarshal([]byte(js), &tr); err != nil {
		t.Fatalf("trace -o json: %v", err)
	}
	var parts []string
	for _, ep := range tr.Endpoints {
		parts = append(parts, fmt.Sprintf("%s:%d=%.4f", ep.IP, ep.Port, ep.Probability))
	}
	return strings.Join(parts, " ")
}

func diff(a, b string) string {
	dir, err := os.MkdirTemp("", "kindtest-state-")
	if err != nil {
		return err.Error()
	}
	defer os.RemoveAll(dir)
	os.WriteFile(dir+"/before", []byte(a), 0o644)
	os.WriteFile(dir+"/after", []byte(b), 0o644)
	out, _ := exec.Command("diff", "-u", dir+"/before", dir+"/after").Output()
	return string(out)
}
