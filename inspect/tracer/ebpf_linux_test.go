package tracer_test

import (
	"encoding/binary"
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	cebpf "github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/ebpf"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/internal/e2etest"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/netns"
	"github.com/k8sguide/k8sguide/lab/nodecmd"
	"github.com/k8sguide/k8sguide/lab/state"
)

// These tests check the ebpf trace against Cilium's datapath itself, three ways:
//   - BPF_PROG_TEST_RUN: the loaded cil_from_netdev program is run on a crafted SYN (no traffic at all), and
//     the destination it rewrites the packet to must be one the trace predicted — exactly the one, with
//     Maglev or once a conntrack entry pins the flow;
//   - real connections: the pod that answers must be one the trace predicted (exactly, with Maglev), and a
//     trace made after the connection must find the conntrack entry the datapath wrote, naming that pod;
//   - with Maglev, for many source ports, the predicted backend is exactly the one that answers.

const tcActRedirect = 7 // TC_ACT_REDIRECT: bpf_host forwards a NodePort packet itself (FIB lookup + redirect)

// predict runs `trace -o json` for a flow from the client with a fixed source port.
func predict(t *testing.T, name, node, dst string, sport int) *trace.Trace {
	t.Helper()
	out, err := e2etest.Quiet("trace", "--name", name, "--node", node, "--dst", dst,
		"--src", "172.18.0.1:"+strconv.Itoa(sport), "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var tr trace.Trace
	if err := json.Unmarshal([]byte(out), &tr); err != nil {
		t.Fatalf("trace output: %v", err)
	}
	return &tr
}

// runProgram runs the node's attached cil_from_netdev (eth0 ingress) on a TCP SYN from the client's address
// and port to dst with BPF_PROG_TEST_RUN, from a thread inside the node's network namespace (the program's
// FIB lookups and map state are the node's). It returns the verdict and the packet's new destination.
func runProgram(t *testing.T, name, node string, dst netip.AddrPort, sport uint16) (uint32, netip.AddrPort) {
	t.Helper()
	pin := filepath.Join(netns.NodeBPFFS(state.Store{Root: e2etest.StateDir}, name, node), "links", "eth0", "cil_from_netdev")
	var verdict uint32
	out := make([]byte, 14+20+20+256) // the SYN (Ethernet, IPv4, TCP) and room for the datapath to grow it
	err := netns.InNamespace(node, func() error {
		eth0, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		l, err := link.LoadPinnedLink(pin, nil)
		if err != nil {
			return err
		}
		defer l.Close()
		info, err := l.Info()
		if err != nil {
			return err
		}
		prog, err := cebpf.NewProgramFromID(info.Program)
		if err != nil {
			return err
		}
		defer prog.Close()
		pkt := synPacket(eth0.HardwareAddr, netip.MustParseAddr("172.18.0.1"), sport, dst)
		ctx := &skbContext{Ifindex: uint32(eth0.Index), IngressIfindex: uint32(eth0.Index)}
		verdict, err = prog.Run(&cebpf.RunOptions{Data: pkt, DataOut: out, Context: ctx})
		return err
	})
	if err != nil {
		t.Fatalf("BPF_PROG_TEST_RUN of %s on %s: %v", pin, node, err)
	}
	ip := out[14:]
	d := netip.AddrFrom4([4]byte(ip[16:20]))
	port := binary.BigEndian.Uint16(ip[20+2 : 20+4])
	return verdict, netip.AddrPortFrom(d, port)
}

// skbContext is the head of struct __sk_buff that BPF_PROG_TEST_RUN takes as the program's context: len,
// pkt_type, mark, queue_mapping, protocol, vlan_present, vlan_tci, vlan_proto, priority, ingress_ifindex,
// ifindex, … (the kernel copies the fields it allows and leaves the rest zero).
type skbContext struct {
	Len, PktType, Mark, QueueMapping, Protocol, VlanPresent, VlanTCI, VlanProto, Priority uint32
	IngressIfindex, Ifindex                                                               uint32
	TCIndex                                                                               uint32
	CB                                                                                    [5]uint32
}

// synPacket is an Ethernet frame holding a TCP SYN with correct checksums.
func synPacket(dstMAC net.HardwareAddr, src netip.Addr, sport uint16, dst netip.AddrPort) []byte {
	pkt := make([]byte, 14+20+20)
	copy(pkt[0:6], dstMAC)
	copy(pkt[6:12], []byte{0x0a, 0x58, 0xac, 0x12, 0x00, 0x01})
	binary.BigEndian.PutUint16(pkt[12:14], 0x0800)
	ip := pkt[14:34]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:4], 40)
	ip[8] = 64
	ip[9] = unix.IPPROTO_TCP
	s4, d4 := src.As4(), dst.Addr().As4()
	copy(ip[12:16], s4[:])
	copy(ip[16:20], d4[:])
	binary.BigEndian.PutUint16(ip[10:12], checksum(ip, 0))
	tcp := pkt[34:54]
	binary.BigEndian.PutUint16(tcp[0:2], sport)
	binary.BigEndian.PutUint16(tcp[2:4], dst.Port())
	binary.BigEndian.PutUint32(tcp[4:8], 1)
	tcp[12] = 5 << 4
	tcp[13] = 0x02 // SYN
	binary.BigEndian.PutUint16(tcp[14:16], 64240)
	var pseudo uint32
	for i := 0; i < 4; i += 2 {
		pseudo += uint32(binary.BigEndian.Uint16(s4[i:])) + uint32(binary.BigEndian.Uint16(d4[i:]))
	}
	pseudo += unix.IPPROTO_TCP + 20
	binary.BigEndian.PutUint16(tcp[16:18], checksum(tcp, pseudo))
	return pkt
}

func checksum(b []byte, sum uint32) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

func endpointSet(tr *trace.Trace) map[string]bool {
	set := map[string]bool{}
	for _, e := range tr.Endpoints {
		set[e.Addr()] = true
	}
	return set
}

func TestEBPFTraceAgreesWithKernel(t *testing.T) {
	for _, alg := range []string{ebpf.LBRandom, ebpf.LBMaglev} {
		t.Run(alg, func(t *testing.T) {
			e2etest.NeedRoot(t)
			e2etest.NeedEBPF(t)
			testEBPFAgreement(t, alg)
		})
	}
}

func testEBPFAgreement(t *testing.T, alg string) {
	var name string
	if alg == ebpf.LBRandom {
		// random is the ebpf lab's default: the package's shared ebpf lab, which this test only reads.
		name = e2etest.SharedLab(t, dataplanes.EBPF)
	} else {
		// Maglev is a lab's shape (the agent's --bpf-lb-algorithm, fixed at up): a lab of its own.
		name = "trc-eb" + alg[:1]
		e2etest.UpLab(t, name, "--dataplane", "ebpf", "--lb-algorithm", alg)
		e2etest.MustK8sguide(t, "deploy", "--name", name)
		e2etest.MustK8sguide(t, "nodeport", "--name", name, "--check", "0")
	}
	np := e2etest.NodePortOf(t, name, "web")
	node := name + "-worker"
	dst := netip.MustParseAddrPort(nodeIP(t, name, node) + ":" + np)

	// BPF_PROG_TEST_RUN: 40 fresh source ports.
	seen := map[string]int{}
	for i := range 40 {
		sport := uint16(20000 + i)
		tr := predict(t, name, node, dst.String(), int(sport))
		want := endpointSet(tr)
		if len(want) != 3 && alg == ebpf.LBRandom || len(want) != 1 && alg == ebpf.LBMaglev {
			t.Fatalf("sport %d: predicted endpoints %v", sport, want)
		}
		verdict, got := runProgram(t, name, node, dst, sport)
		if verdict != tcActRedirect {
			t.Errorf("sport %d: verdict %d, want TC_ACT_REDIRECT (%d)", sport, verdict, tcActRedirect)
		}
		if !want[got.String()] {
			t.Errorf("sport %d: the program rewrote the destination to %s; the trace predicted %v", sport, got, want)
		}
		seen[got.String()]++
		// The datapath has written a conntrack entry for the flow: now the trace must name exactly that
		// backend, found through the entry.
		again := predict(t, name, node, dst.String(), int(sport))
		if again.Conntrack == nil || len(again.Endpoints) != 1 || again.Endpoints[0].Addr() != got.String() {
			t.Errorf("sport %d after the program ran: trace endpoints %v, conntrack %v; want exactly %s through the entry", sport, again.Endpoints, again.Conntrack, got)
		}
	}
	if len(seen) != 3 {
		t.Errorf("over 40 source ports the program chose %v; want all 3 backends", seen)
	}
	t.Logf("BPF_PROG_TEST_RUN backends over 40 flows: %v", seen)

	// Real connections from the client (`trace --verify`: a fresh source port each, the prediction, the
	// connection, then the conntrack entry the datapath wrote for it). With Maglev the prediction is a single
	// backend, so agreement means exactly that backend answered and was recorded.
	answered := map[string]int{}
	for range 30 {
		v := e2etest.Verify(t, name, "--node", node, "--dst", dst.String())
		if v.Result != "agree" {
			t.Errorf("%s", disagreement(v))
			continue
		}
		if alg == ebpf.LBMaglev && len(v.Prediction.Paths) != 1 {
			t.Errorf("maglev prediction for %s has %d paths, want exactly one", v.Prediction.Packet.Src, len(v.Prediction.Paths))
		}
		answered[v.Connection.Pod]++
	}
	t.Logf("real connections answered by %v", answered)
	if len(answered) != 3 {
		t.Errorf("30 connections were answered by %v; want all 3 pods", answered)
	}
	// A flow the datapath does not load-balance, checked the same way: a port with no frontend passes to the
	// node's stack (refused): no conntrack entry, and a connection that fails as predicted.
	unused := netip.AddrPortFrom(dst.Addr(), 39999).String()
	if v := e2etest.Verify(t, name, "--node", node, "--dst", unused); v.Result != "agree" || v.Prediction.Verdict == trace.Delivered {
		t.Errorf("no frontend: %s", disagreement(v))
	}
	// The ClusterIP from every pod: bpf_lxc on the pod's veth balances it per packet. 10 real connections from
	// each pod (30 in all, which every pod answers but with a chance of 3·(2/3)^30), each one traced on the
	// pod's node and compared with the conntrack entry bpf_lxc wrote; a pod its Service sends back to itself
	// sees Cilium's service loopback address, the others the pod's own.
	cip := clusterIP(t, name, "web") + ":80"
	w, _ := e2etest.Provider().Workloads(t.Context(), name)
	pods, _ := w.Pods(t.Context())
	overall := map[string]int{}
	for _, p := range pods {
		if p.Labels["app"] != "web" {
			continue
		}
		for range 10 {
			v := e2etest.Verify(t, name, "--node", p.Spec.NodeName, "--dst", cip, "--from", "pod/"+p.Name)
			if v.Result != "agree" || v.Prediction.Verdict != trace.Delivered {
				t.Errorf("pod %s to the ClusterIP: %s", p.Name, disagreement(v))
				continue
			}
			overall[v.Connection.Pod]++
			src, _, _ := strings.Cut(v.Connection.Client, ":")
			if want := map[bool]string{true: "169.254.42.1", false: p.Status.PodIP}[v.Connection.Pod == p.Name]; src != want {
				t.Errorf("pod %s to the ClusterIP, answered by %s from %s: want source %s", p.Name, v.Connection.Pod, src, want)
			}
		}
	}
	t.Logf("ClusterIP connections from the pods answered by %v", overall)
	if len(overall) != 3 {
		t.Errorf("the pods' ClusterIP connections were answered by %v; want all 3 pods", overall)
	}
	// And from every node: the socket LB (bpf_sock's cil_sock4_connect, on the node's cgroup) connects the
	// socket to a backend. 10 real connections from each node (30 in all), each traced and compared with the pod
	// that answered and the source it saw (cilium_host's address for a pod of the node, the node's own
	// otherwise).
	overall = map[string]int{}
	status, err := e2etest.Provider().Status(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range status.Nodes {
		for range 10 {
			v := e2etest.Verify(t, name, "--node", n.Name, "--dst", cip, "--from", "node")
			if v.Result != "agree" || v.Prediction.Verdict != trace.Delivered {
				t.Errorf("node %s to the ClusterIP: %s", n.Name, disagreement(v))
				continue
			}
			overall[v.Connection.Pod]++
		}
	}
	t.Logf("ClusterIP connections from the nodes answered by %v", overall)
	if len(overall) != 3 {
		t.Errorf("the nodes' ClusterIP connections were answered by %v; want all 3 pods", overall)
	}

	// Offline: a saved snapshot carries the maps and traces exactly like the live node.
	file := filepath.Join(t.TempDir(), "node.json")
	e2etest.MustK8sguide(t, "snapshot", "--name", name, "--node", node, "-o", file)
	for _, src := range []string{"172.18.0.1:20000", "172.18.0.1:45555", "172.18.0.1"} {
		args := []string{"--dst", dst.String(), "--src", src, "-o", "json"}
		live, err := e2etest.Quiet(append([]string{"trace", "--name", name, "--node", node}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		offline, err := e2etest.Quiet(append([]string{"trace", "--snapshot", file}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		if live != offline {
			t.Errorf("--src %s: the trace from the saved snapshot differs from the live one:\nlive:    %s\noffline: %s", src, live, offline)
		}
	}
	if list, err := e2etest.Quiet("lb", "list", "--snapshot", file); err != nil || !strings.Contains(list, dst.String()+"/TCP (0)") {
		t.Errorf("lb list --snapshot: %v\n%s", err, list)
	}

	// counters: 60 real connections, each answered, and each written down by the datapath in its conntrack map
	// with the backend whose pod answered it.
	var c trace.Counted
	out := e2etest.MustK8sguide(t, "counters", "--name", name, "--node", node, "--dst", dst.String(), "--count", "60", "-o", "json")
	if err := json.Unmarshal([]byte(out), &c); err != nil {
		t.Fatalf("counters -o json: %v\n%s", err, out)
	}
	if c.Made != 60 || c.Answered != 60 {
		t.Errorf("counters: %d of %d answered, want 60 of 60", c.Answered, c.Made)
	}
	for _, e := range c.Endpoints {
		if e.Conntrack == nil || *e.Conntrack != e.Answered {
			t.Errorf("counters: %s answered %d; Cilium's conntrack map names it for %s of the run's connections", e.Endpoint.Pod, e.Answered, countOf(e.Conntrack))
		}
	}

	if t.Failed() {
		out, _ := e2etest.Quiet("lb", "list", "--name", name, "--node", node)
		t.Logf("lb list on %s:\n%s", node, out)
	}
}

func podName(nsName string) string {
	if _, n, ok := cutSlash(nsName); ok {
		return n
	}
	return nsName
}

func cutSlash(s string) (string, string, bool) {
	for i := range len(s) {
		if s[i] == '/' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// TestEBPFSessionAffinity checks ClientIP session affinity on Cilium's datapath: every connection from the
// client reaches the pod the first one reached, and after it the trace names exactly that pod, found through
// the affinity entry the datapath wrote (cilium_lb4_affinity), for a source port never used before.
func TestEBPFSessionAffinity(t *testing.T) {
	e2etest.NeedRoot(t)
	e2etest.NeedEBPF(t)
	// The package's shared ebpf lab; the sticky Service goes at the end.
	name := e2etest.SharedLab(t, dataplanes.EBPF)
	e2etest.DeleteAtCleanup(t, name, "service/sticky")
	file := filepath.Join(t.TempDir(), "sticky.yaml")
	manifest := `apiVersion: v1
kind: Service
metadata:
  name: sticky
  namespace: default
spec:
  type: NodePort
  selector:
    app: web
  sessionAffinity: ClientIP
  ports:
  - port: 80
    targetPort: 80
`
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	e2etest.MustK8sguide(t, "deploy", "--name", name, file)
	node := name + "-worker"
	dst := nodeIP(t, name, node) + ":" + e2etest.NodePortOf(t, name, "sticky")

	first := predict(t, name, node, dst, 41000)
	if len(first.Endpoints) != 3 {
		t.Fatalf("before any connection the trace predicts %v; want all 3 endpoints", first.Endpoints)
	}
	var pod string
	for i := range 10 {
		out, err := e2etest.Quiet(append([]string{"exec", "--name", name, lab.ClientName(name), "--"}, nodecmd.ConnectArgv(e2etest.Binary, dst, 41000+i)...)...)
		if err != nil {
			t.Fatal(err)
		}
		var c trace.Connection
		if err := json.Unmarshal([]byte(out), &c); err != nil || !c.Answered {
			t.Fatalf("connection %d: %q %v", i, out, err)
		}
		if pod == "" {
			pod = c.Pod
		} else if c.Pod != pod {
			t.Errorf("connection %d answered by %s, the first by %s: affinity did not hold", i, c.Pod, pod)
		}
	}
	after := predict(t, name, node, dst, 42424)
	if len(after.Endpoints) != 1 || podName(after.Endpoints[0].Pod) != pod {
		t.Errorf("after the connections the trace predicts %v; want exactly %s through the affinity entry", after.Endpoints, pod)
	}
	found := false
	for _, p := range after.Paths {
		for _, h := range p.Hops {
			found = found || h.Table == "cilium_lb4_affinity" && h.Matched
		}
	}
	if !found {
		t.Errorf("the trace does not show the cilium_lb4_affinity entry deciding the flow: %+v", after.Paths)
	}
}
