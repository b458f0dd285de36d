package tracer_test

import (
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/iptables"
	"github.com/k8sguide/k8sguide/dataplanes/ipvs"
	"github.com/k8sguide/k8sguide/dataplanes/nftables"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/snapshot"
	"github.com/k8sguide/k8sguide/inspect/tracer"
	"github.com/k8sguide/k8sguide/internal/e2etest"
	"github.com/k8sguide/k8sguide/lab"
)

// These tests check traces against the kernel on a real netns lab: for each case the static prediction
// must agree with the rules the kernel's own trace (nftrace) reports for a real connection of that flow, and
// the pod that answered must be one the prediction allows (`trace --verify` checks both).

func TestMain(m *testing.M) {
	if spec := os.Getenv(proxierEnv); spec != "" {
		os.Exit(runProxier(spec)) // a benchmark's node (bench_node_linux_test.go)
	}
	os.Exit(e2etest.Main(m))
}

func mustAgree(t *testing.T, v *trace.Verification) *trace.Path {
	t.Helper()
	if v.Result != "agree" {
		t.Fatal(disagreement(v))
	}
	if v.Path < 0 {
		t.Fatal("no predicted path chosen")
	}
	return &v.Prediction.Paths[v.Path]
}

func nodeIP(t *testing.T, name, node string) string {
	t.Helper()
	st, err := e2etest.Provider().Status(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range st.Nodes {
		if n.Name == node {
			return n.IP
		}
	}
	t.Fatalf("no node %s", node)
	return ""
}

func clusterIP(t *testing.T, name, service string) string {
	t.Helper()
	w, _ := e2etest.Provider().Workloads(t.Context(), name)
	svcs, _ := w.Services(t.Context())
	for _, s := range svcs {
		if s.Name == service {
			return s.Spec.ClusterIP
		}
	}
	t.Fatalf("no service %s", service)
	return ""
}

// podOn returns a pod of app=web on the given node, and the list of all.
func podOn(t *testing.T, name, node string) string {
	t.Helper()
	w, _ := e2etest.Provider().Workloads(t.Context(), name)
	pods, _ := w.Pods(t.Context())
	for _, p := range pods {
		if p.Spec.NodeName == node && p.Status.PodIP != "" {
			return p.Name
		}
	}
	return ""
}

// kernelTimers matches the seconds left on a kernel timer in a trace's text ("expires in 10769 s").
var kernelTimers = regexp.MustCompile(`(expires in )[0-9]+ s`)

// ipvsConnCounts matches an IPVS real server's connection counts in a trace's text ("-> 10.244.1.5:80 Masq 1 0 1":
// its weight, then its active and inactive connections).
var ipvsConnCounts = regexp.MustCompile(`( (?:Masq|Route|Tunnel|Local) [0-9]+) [0-9]+ [0-9]+`)

// steadyJSON is a trace as JSON without what the kernel changes by itself between two reads of a node that
// nothing else touches: timers counting down, and the connection counts of IPVS real servers (a connection an
// earlier test made expires).
func steadyJSON(t *testing.T, tr *trace.Trace) string {
	t.Helper()
	return steadyText(mustJSON(t, tr))
}

// steadyText is steadyJSON of a trace's text.
func steadyText(s string) string {
	return ipvsConnCounts.ReplaceAllString(kernelTimers.ReplaceAllString(s, "${1}N s"), "${1} N N")
}

func TestTraceAgreesWithKernel(t *testing.T) {
	for _, d := range []dataplanes.Name{dataplanes.IPTables, dataplanes.NFTables, dataplanes.IPVS} {
		t.Run(string(d), func(t *testing.T) {
			e2etest.NeedRoot(t, e2etest.ToolFor(d), "nft")
			if d == dataplanes.IPVS {
				if err := ipvs.CheckKernel(); err != nil {
					t.Skipf("%v: TestTraceAgreesWithKernelInVM runs this case in the IPVS test VM", err)
				}
				e2etest.NeedRoot(t, "ipset", "xtables-monitor")
			}
			testAgreement(t, d)
		})
	}
}

func testAgreement(t *testing.T, d dataplanes.Name) {
	// The package's shared lab of d (web, 3 pods, its NodePort): what this test adds goes at its end, and web,
	// which it scales, goes back to 3 pods.
	name := e2etest.SharedLab(t, d)
	e2etest.DeleteAtCleanup(t, name, "service/web-local", "service/web-sticky")
	e2etest.ScaleBackAtCleanup(t, name)
	np := e2etest.NodePortOf(t, name, "web")
	cip := clusterIP(t, name, "web")
	nodes := lab.NodeNames(name, 2)
	worker := nodes[1]

	t.Run("nodeport-from-client", func(t *testing.T) {
		for _, n := range nodes {
			for i := 0; i < 3; i++ {
				p := mustAgree(t, e2etest.Verify(t, name, "--dst", nodeIP(t, name, n)+":"+np))
				if p.Verdict != trace.Delivered || p.SNAT == "172.18.0.1" {
					t.Errorf("%s: NodePort from outside must be delivered and masqueraded: %s snat %s", n, p.Verdict, p.SNAT)
				}
			}
		}
	})
	// counters: real connections to worker2's NodePort, each answered by a pod; on iptables the kernel's counter
	// of each choice rule moved by exactly the connections its endpoint's pod answered (nat rules see each
	// connection's first packet once), and the rules' own chances are the cascade's 1/3, 1/2 and the rest.
	t.Run("counters", func(t *testing.T) {
		const n = 60
		var c trace.Counted
		out := e2etest.MustK8sguide(t, "counters", "--name", name, "--node", worker, "--service", "web", "--count", strconv.Itoa(n), "-o", "json")
		if err := json.Unmarshal([]byte(out), &c); err != nil {
			t.Fatalf("counters -o json: %v\n%s", err, out)
		}
		answered := 0
		for _, e := range c.Endpoints {
			answered += e.Answered
		}
		if c.Made != n || c.Answered != n || answered != n || len(c.Endpoints) != 3 {
			t.Fatalf("made %d, answered %d (%d by the trace's endpoints), %d endpoints: want %d, all answered by the 3 pods\n%s", c.Made, c.Answered, answered, len(c.Endpoints), n, out)
		}
		// conntrack's record: each connection's entry in the node, replied to by the endpoint it was sent to.
		for _, e := range c.Endpoints {
			if e.Conntrack == nil || *e.Conntrack != e.Answered {
				t.Errorf("%s answered %d; the node's conntrack holds %s new entries replied to from it", e.Endpoint.Pod, e.Answered, countOf(e.Conntrack))
			}
		}
		if d != dataplanes.IPTables {
			if len(c.Rules) != 0 || len(c.Notes) == 0 {
				t.Errorf("%s: rules %v, notes %v: want none read, and a note saying so", d, c.Rules, c.Notes)
			}
			return
		}
		if len(c.Rules) != 3 || c.Rules[0].Reached != n {
			t.Fatalf("rules %+v: want the 3 rules of the choice, the first reached by all %d", c.Rules, n)
		}
		for i, want := range []float64{1.0 / 3, 0.5, 1} {
			if math.Abs(c.Rules[i].Chance-want) > 1e-6 {
				t.Errorf("rule %d's chance %v, want %v", c.Rules[i].Rule, c.Rules[i].Chance, want)
			}
		}
		for _, r := range c.Rules {
			for _, e := range c.Endpoints {
				if e.Endpoint.Pod == r.Endpoint && uint64(e.Answered) != r.Counted() {
					t.Errorf("rule %d sends to %s: the kernel counted %d, the pod answered %d", r.Rule, r.Endpoint, r.Counted(), e.Answered)
				}
			}
		}
	})
	t.Run("snapshot-offline", func(t *testing.T) {
		if d == dataplanes.IPVS {
			// The connections just made reach IPVS's counters, and round robin's turn with them, only when the
			// kernel's estimator next runs: the snapshot and the live trace below must not straddle that.
			time.Sleep(ipvs.EstimatorPeriod + 500*time.Millisecond)
		}
		// A saved snapshot traces exactly like the live node, and holds each engine's rules once.
		file := filepath.Join(t.TempDir(), "worker.json")
		e2etest.MustK8sguide(t, "snapshot", "--name", name, "--node", worker, "-o", file)
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		snap, err := snapshot.Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		var rules iptables.Part
		var ruleset nftables.Part
		var state *ipvs.State
		for name, part := range map[dataplanes.Name]any{dataplanes.IPTables: &rules, dataplanes.NFTables: &ruleset, dataplanes.IPVS: &state} {
			if raw := snap.Part(name); raw != nil {
				if err := json.Unmarshal(raw, part); err != nil {
					t.Fatalf("the snapshot's %s part: %v", name, err)
				}
			}
		}
		switch d {
		case dataplanes.IPVS:
			// The NodePort's virtual server on the worker's address, and kube-proxy's ipvs-mode rules.
			if state == nil || state.Find("tcp", netip.MustParseAddr(nodeIP(t, name, worker)), uint16(mustAtoi(t, np)), 0) == nil ||
				!strings.Contains(rules["nf_tables"], "-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT") {
				t.Errorf("ipvs node: no virtual server for the NodePort, or no KUBE-NODE-PORT jump: ipvs %+v", state)
			}
		case dataplanes.NFTables:
			if !strings.Contains(ruleset.Text, "table ip kube-proxy {") || len(ruleset.Omitted) != 0 {
				t.Errorf("nftables node: snapshot lacks the kube-proxy table or omits %v", ruleset.Omitted)
			}
		default:
			if !strings.Contains(rules["nf_tables"], "-A KUBE-NODEPORTS") || strings.Contains(ruleset.Text, "table ip nat") ||
				!slices.Contains(ruleset.Omitted, "ip nat") {
				t.Errorf("iptables node: iptables rules missing, or iptables-nft's tables listed twice (omitted %v)", ruleset.Omitted)
			}
		}
		dst := nodeIP(t, name, worker) + ":" + np
		live := e2etest.MustK8sguide(t, "trace", "--name", name, "--node", worker, "--dst", dst, "--src", "172.18.0.1:40404", "-o", "json")
		offline := e2etest.MustK8sguide(t, "trace", "--snapshot", file, "--dst", dst, "--src", "172.18.0.1:40404", "-o", "json")
		// Read a few seconds apart (seconds more in the IPVS VM): what the kernel changes by itself between the
		// reads (an IPVS real server's connection counts as the counters' connections expire) is not compared.
		if steadyText(live) != steadyText(offline) {
			t.Errorf("trace --snapshot differs from trace --node:\nlive:\n%s\noffline:\n%s", live, offline)
		}
	})
	t.Run("clusterip-from-pod", func(t *testing.T) {
		pod := podOn(t, name, worker)
		for i := 0; i < 3; i++ {
			mustAgree(t, e2etest.Verify(t, name, "--node", worker, "--from", "pod/"+pod, "--dst", cip+":80"))
		}
	})
	t.Run("clusterip-from-node", func(t *testing.T) {
		for i := 0; i < 3; i++ {
			mustAgree(t, e2etest.Verify(t, name, "--node", worker, "--from", "node", "--dst", cip+":80"))
		}
	})
	t.Run("localhost-nodeport", func(t *testing.T) {
		p := mustAgree(t, e2etest.Verify(t, name, "--node", worker, "--from", "node", "--dst", "127.0.0.1:"+np))
		want := trace.Delivered // iptables mode serves NodePorts on localhost
		if d == dataplanes.NFTables || d == dataplanes.IPVS {
			// nftables mode never does, nor ipvs mode (no virtual server on a loopback address: the ipvs
			// proxier's isValidForSet): nothing translates it, nothing listens.
			want = trace.Local
		}
		if p.Verdict != want {
			t.Errorf("localhost NodePort in %s mode: %s, want %s", d, p.Verdict, want)
		}
	})
	// hairpin and no-endpoints shrink web (to one replica, then none); the subtests after them that need three
	// scale it back, once (a rollout of three pods takes a minute and a half in the IPVS VM).
	replicas := 3
	scaleTo := func(t *testing.T, n int) {
		t.Helper()
		if replicas != n {
			e2etest.MustK8sguide(t, "scale", "--name", name, "--replicas", strconv.Itoa(n))
			replicas = n
		}
	}
	t.Run("hairpin", func(t *testing.T) {
		// With one replica the pod calling its own Service can only reach itself: the hairpin path.
		scaleTo(t, 1)
		var pod, node string
		for _, n := range nodes {
			if p := podOn(t, name, n); p != "" {
				pod, node = p, n
			}
		}
		p := mustAgree(t, e2etest.Verify(t, name, "--node", node, "--from", "pod/"+pod, "--dst", cip+":80"))
		if p.Endpoint == nil || !strings.HasSuffix(p.Endpoint.Pod, "/"+pod) {
			t.Fatalf("hairpin: want the pod itself as endpoint, got %+v", p.Endpoint)
		}
		if p.SNAT == p.Endpoint.IP {
			t.Errorf("hairpin traffic must be masqueraded (the pod would answer itself directly): snat %s", p.SNAT)
		}
	})
	t.Run("no-endpoints", func(t *testing.T) {
		scaleTo(t, 0)
		// iptables and nftables mode reject it with their own rules; in ipvs mode the virtual server stays,
		// with no real server, and IPVS itself answers with port unreachable (ip_vs_leave).
		p := mustAgree(t, e2etest.Verify(t, name, "--dst", nodeIP(t, name, worker)+":"+np))
		if p.Verdict != trace.Rejected {
			t.Errorf("a Service with no endpoints: %s, want rejected", p.Verdict)
		}
	})
	t.Run("external-traffic-policy-local", func(t *testing.T) {
		scaleTo(t, 3)
		e2etest.MustK8sguide(t, "nodeport", "--name", name, "--service", "web-local", "--external-traffic-policy", "Local", "--check", "0")
		lnp := e2etest.NodePortOf(t, name, "web-local")
		// A worker has local endpoints: only those, and the client's address is kept.
		p := mustAgree(t, e2etest.Verify(t, name, "--dst", nodeIP(t, name, worker)+":"+lnp))
		if p.Verdict != trace.Delivered || p.SNAT != "172.18.0.1" || p.Endpoint == nil || p.Endpoint.Node != worker {
			t.Errorf("eTP Local with a local endpoint: %s to %+v snat %s; want delivered to a pod on %s, source kept", p.Verdict, p.Endpoint, p.SNAT, worker)
		}
		// The control plane has none: the packet is dropped. In ipvs mode its virtual server gets every endpoint
		// instead (kubernetes#97081, for the node's own pods' sake): the packet reaches a pod on a worker with
		// the client's address, the worker answers the client directly, and the connection fails.
		p = mustAgree(t, e2etest.Verify(t, name, "--dst", nodeIP(t, name, nodes[0])+":"+lnp))
		switch {
		case d == dataplanes.IPVS && (p.Verdict != trace.Delivered || p.Reply == nil || !p.Reply.Bypasses):
			t.Errorf("eTP Local without a local endpoint, ipvs mode: %s, reply %+v; want delivered with a reply that bypasses the node", p.Verdict, p.Reply)
		case d != dataplanes.IPVS && p.Verdict != trace.Dropped:
			t.Errorf("eTP Local without a local endpoint: %s, want dropped", p.Verdict)
		}
	})
	t.Run("session-affinity", func(t *testing.T) {
		scaleTo(t, 3)
		manifest := filepath.Join(t.TempDir(), "sticky.yaml")
		os.WriteFile(manifest, []byte(`apiVersion: v1
kind: Service
metadata: {name: web-sticky, namespace: default}
spec:
  type: NodePort
  selector: {app: web}
  sessionAffinity: ClientIP
  ports: [{port: 80, targetPort: 80, protocol: TCP}]
`), 0o644)
		e2etest.MustK8sguide(t, "deploy", "--name", name, manifest)
		snp := e2etest.NodePortOf(t, name, "web-sticky")
		dst := nodeIP(t, name, worker) + ":" + snp
		first := mustAgree(t, e2etest.Verify(t, name, "--dst", dst))
		// Now the client is in the endpoint's recent list: the next flow has one path, to the same pod.
		v := e2etest.Verify(t, name, "--dst", dst)
		second := mustAgree(t, v)
		if len(v.Prediction.Paths) != 1 {
			t.Errorf("with affinity established the prediction should be certain, got %d paths", len(v.Prediction.Paths))
		}
		if first.Endpoint == nil || second.Endpoint == nil || first.Endpoint.IP != second.Endpoint.IP {
			t.Errorf("affinity: first flow to %+v, second to %+v", first.Endpoint, second.Endpoint)
		}
	})
	t.Run("read-for-one-packet", func(t *testing.T) {
		scaleTo(t, 3)
		// A live trace reads only what its packet's walk reaches (tracer.CollectFor: iptables-nft chain by
		// chain; the other engines whole): its answer must be the one the whole node gives.
		pod := podOn(t, name, worker)
		k := &snapshot.Kubernetes{ClientIP: "172.18.0.1", Pods: []snapshot.Pod{{Namespace: "default", Name: pod, IP: podIP(t, name, pod)}}}
		wip := nodeIP(t, name, worker)
		// One whole read for every packet: the lab does not change between them (each whole read costs seconds,
		// and under the IPVS VM's emulation a minute).
		whole := collectIn(t, worker, "")
		whole.Kubernetes = k
		for _, req := range []tracer.Request{
			{Dst: wip + ":" + np},
			{Dst: cip + ":80", From: "pod/" + pod},
			{Dst: cip + ":80", From: "node"},
			{Dst: "127.0.0.1:" + np, From: "node"},
			{Dst: wip + ":" + e2etest.NodePortOf(t, name, "web-sticky")},
			{Dst: wip + ":" + e2etest.NodePortOf(t, name, "web-local"), Src: "172.18.0.1:40404"},
			{Dst: wip + ":1", Proto: "udp"},
		} {
			scope, err := json.Marshal(tracer.ScopeRequest{Request: req, Kubernetes: k})
			if err != nil {
				t.Fatal(err)
			}
			var part *snapshot.Snapshot
			if d == dataplanes.NFTables {
				// An nftables-mode node has no iptables-nft table: its read for the packet lists the ruleset
				// once. A part that would not open made the collector read the node whole a second time.
				var runs []string
				part, runs = collectCounting(t, worker, string(scope), "nft")
				if len(runs) != 1 {
					t.Errorf("%+v: nft ran %d times in the read for the packet, want once: %q", req, len(runs), runs)
				}
			} else {
				part = collectIn(t, worker, string(scope))
			}
			part.Kubernetes = k
			want, err := tracer.Trace(whole, req)
			if err != nil {
				t.Fatalf("%+v: %v", req, err)
			}
			got, err := tracer.Trace(part, req)
			if err != nil {
				t.Fatalf("%+v, read for the packet: %v", req, err)
			}
			// The two reads are seconds apart (minutes under the IPVS VM's emulation): a timer the kernel counts down
			// (an IPVS persistence template's) has moved between them, and a connection may have expired.
			if w, g := steadyJSON(t, want), steadyJSON(t, got); w != g {
				t.Errorf("%+v: the trace of what was read for the packet differs from the whole node's:\nwhole:\n%s\nread for it:\n%s", req, w, g)
			}
			var wr, pr iptables.Part
			json.Unmarshal(whole.Part(dataplanes.IPTables), &wr)
			json.Unmarshal(part.Part(dataplanes.IPTables), &pr)
			wn, pn := strings.Count(wr["nf_tables"], " -A "), strings.Count(pr["nf_tables"], " -A ")
			t.Logf("%+v: %d of the node's %d iptables rules read", req, pn, wn)
			if d != dataplanes.NFTables && (pr[iptables.ScopeKey] == "" || pn == 0 || pn >= wn) {
				t.Errorf("%+v: iptables-nft's rules not read for the packet (scope %q): %d of %d rules", req, pr[iptables.ScopeKey], pn, wn)
			}
		}
	})
}

// collectIn runs the collector in a lab's node: the whole node, or (forPacket, a tracer.ScopeRequest) what one
// packet's walk reaches.
func collectIn(t *testing.T, node, forPacket string, env ...string) *snapshot.Snapshot {
	t.Helper()
	argv := []string{"netns", "exec", node, e2etest.Binary, "internal", "collect"}
	if forPacket != "" {
		argv = append(argv, "--for", forPacket)
	}
	cmd := exec.Command("ip", argv...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("collect in %s: %v", node, err)
	}
	s, err := snapshot.Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// collectCounting is collectIn with tool run through a wrapper that logs each run's arguments: it returns the
// snapshot and those runs, one line each.
func collectCounting(t *testing.T, node, forPacket, tool string) (*snapshot.Snapshot, []string) {
	t.Helper()
	real, err := exec.LookPath(tool)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	log := filepath.Join(dir, tool+".log")
	script := "#!/bin/sh\necho \"$*\" >> " + log + "\nexec " + real + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, tool), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	s := collectIn(t, node, forPacket, "PATH="+dir+":"+os.Getenv("PATH"))
	logged, err := os.ReadFile(log)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var runs []string
	for line := range strings.Lines(string(logged)) {
		runs = append(runs, strings.TrimSpace(line))
	}
	return s, runs
}

func podIP(t *testing.T, name, pod string) string {
	t.Helper()
	w, _ := e2etest.Provider().Workloads(t.Context(), name)
	pods, _ := w.Pods(t.Context())
	for _, p := range pods {
		if p.Name == pod {
			return p.Status.PodIP
		}
	}
	t.Fatalf("no pod %s", pod)
	return ""
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// disagreement describes a verification that did not agree, rows and connection included.
func disagreement(v *trace.Verification) string {
	var b strings.Builder
	p := v.Prediction
	fmt.Fprintf(&b, "%s %s -> %s from %s: prediction and kernel disagree: %v; connection %+v", p.Node, p.Packet.Src, p.Packet.Dst, p.Packet.From, v.Reasons, v.Connection)
	for _, r := range v.Rows {
		fmt.Fprintf(&b, "\n  %-70s %-60s %v", r.Predicted, r.Kernel, r.Agree)
	}
	return b.String()
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// countOf prints a count that may be missing.
func countOf(n *int) string {
	if n == nil {
		return "no count of"
	}
	return strconv.Itoa(*n)
}
