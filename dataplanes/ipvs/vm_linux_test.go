package ipvs_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"

	"github.com/k8sguide/k8sguide/dataplanes/ipvs"
	"github.com/k8sguide/k8sguide/dataplanes/kubeproxy"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/kerneltrace"
	"github.com/k8sguide/k8sguide/inspect/snapshot"
	"github.com/k8sguide/k8sguide/inspect/tracer"
	"github.com/k8sguide/k8sguide/internal/vmtest"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/podserver"
)

// These tests prove the IPVS engine on a kernel that has IPVS: Debian's, booted under QEMU with this test
// binary as its init (internal/vmtest). TestIPVSInVM runs on the host and boots the VM; the TestGuest… tests
// run inside it, where the VM's root namespace is a node running the upstream ipvs proxier.

var capture = flag.Bool("ipvs.capture", false, "in the VM: print the node's ipvsadm, ipset and connection listings and its snapshot, for the parser fixtures in testdata/")

func TestMain(m *testing.M) {
	if vmtest.InGuest() {
		vmtest.GuestMain(m)
	}
	os.Exit(m.Run())
}

func TestIPVSInVM(t *testing.T) {
	if vmtest.InGuest() {
		t.Skip("the VM does not boot itself")
	}
	args := []string{"-test.run=^TestGuest", "-test.v"}
	if *capture {
		args = append(args, "-ipvs.capture")
	}
	took := vmtest.Boot(t, vmtest.Options{Modules: vmtest.NodeModules, Binaries: vmtest.NodeTools, Args: args})
	t.Logf("IPVS VM: boot, tests and power-off took %s", took.Round(time.Millisecond))
}

// The guest's topology: the VM's root namespace is the node; a client namespace hangs off its eth0, and three
// pods sit on a bridge, as on a lab node.
const (
	nodeIP   = "172.18.0.2"
	clientIP = "172.18.0.1"
	bridgeIP = "10.244.0.1"
	nodePort = 30080
)

var pods = []struct{ name, ip string }{{"web-a", "10.244.0.2"}, {"web-b", "10.244.0.3"}, {"web-c", "10.244.0.4"}}

// guestNode builds the topology and starts the pods' servers; it returns the client's namespace.
func guestNode(t *testing.T) netns.NsHandle {
	t.Helper()
	if !vmtest.InGuest() {
		t.Skip("runs inside the IPVS test VM (TestIPVSInVM boots it)")
	}
	client := newNamespace(t)
	must(t, netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "client0"}))
	moveAndAddress(t, "client0", client, "eth0", clientIP+"/16", "")
	address(t, "eth0", nodeIP+"/16")
	must(t, netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "cni0"}}))
	address(t, "cni0", bridgeIP+"/24")
	bridge, err := netlink.LinkByName("cni0")
	must(t, err)
	for i, p := range pods {
		ns := newNamespace(t)
		host := fmt.Sprintf("veth%d", i)
		must(t, netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: host}, PeerName: "peer0"}))
		l, err := netlink.LinkByName(host)
		must(t, err)
		must(t, netlink.LinkSetMaster(l, bridge))
		up(t, host)
		moveAndAddress(t, "peer0", ns, "eth0", p.ip+"/24", "10.244.0.1")
		inNamespace(t, ns, func() {
			l, err := net.Listen("tcp4", p.ip+":8080")
			must(t, err)
			go http.Serve(l, podserver.Handler("default/"+p.name, "node"))
		})
	}
	return client
}

// services is the web Service (NodePort 30080) and its EndpointSlice, as the lab's apiserver would hand them
// to kube-proxy.
func services() ([]v1.Service, []discoveryv1.EndpointSlice) {
	svc := v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: v1.ServiceSpec{Type: v1.ServiceTypeNodePort, ClusterIP: "10.96.0.100", ClusterIPs: []string{"10.96.0.100"},
			Ports:    []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: nodePort}},
			Selector: map[string]string{"app": "web"}, ExternalTrafficPolicy: v1.ServiceExternalTrafficPolicyCluster},
	}
	ready, port, name, proto := true, int32(8080), "http", v1.ProtocolTCP
	slice := discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}
	for _, p := range pods {
		node := "node"
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{p.ip}, NodeName: &node,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &ready}})
	}
	return []v1.Service{svc}, []discoveryv1.EndpointSlice{slice}
}

// kubernetes is what the snapshot would learn from the apiserver.
func kubernetes() *snapshot.Kubernetes {
	k := &snapshot.Kubernetes{ClientIP: clientIP, Nodes: []snapshot.Node{{Name: "node", IP: nodeIP}},
		Services: []snapshot.Service{{Namespace: "default", Name: "web", ClusterIP: "10.96.0.100",
			Ports: []snapshot.ServicePort{{Name: "http", Protocol: "TCP", Port: 80, NodePort: nodePort}}}}}
	for _, p := range pods {
		k.Pods = append(k.Pods, snapshot.Pod{Namespace: "default", Name: p.name, IP: p.ip, Node: "node"})
	}
	return k
}

// TestGuestNodePort runs the upstream ipvs proxier on the node, traces a client's packet to the NodePort and
// checks the prediction against the kernel: which pods answer real connections, in round robin's order, the
// source address they see, and the IPVS connection entries the kernel made.
func TestGuestNodePort(t *testing.T) {
	client := guestNode(t)
	ctx := context.Background()
	proxy, err := kubeproxy.New(ctx, ipvs.Engine{}.Lab().KubeProxyMode, kubeproxy.NodeConfig{
		NodeName: "node", NodeIP: net.ParseIP(nodeIP), ClusterCIDR: lab.PodSubnet,
		SyncPeriod: 30 * time.Second, MinSyncPeriod: time.Second, Logger: klog.Background(),
	}, map[string]string{v1.LabelHostname: "node"})
	must(t, err)
	svcs, slices := services()
	start := time.Now()
	proxy.Apply(svcs, slices)
	t.Logf("the proxier's first sync took %s", time.Since(start).Round(time.Millisecond))

	dst := fmt.Sprintf("%s:%d", nodeIP, nodePort)
	snap := collect(t)
	if *capture {
		printCapture(t, snap)
	}
	tr, err := tracer.Trace(snap, tracer.Request{Dst: dst, Src: clientIP + ":40000"})
	must(t, err)
	t.Logf("trace:\n%s", jsonOf(tr))

	// What the trace says.
	// NodePort traffic from outside is masqueraded; MASQUERADE takes the address of the interface towards the
	// pod, the bridge's.
	if tr.Dataplane != "ipvs" || tr.Verdict != trace.Delivered || tr.SNAT != bridgeIP || tr.Service != "default/web:http" {
		t.Fatalf("trace: dataplane %s, verdict %s, snat %s, service %q; want ipvs, delivered, %s, default/web:http", tr.Dataplane, tr.Verdict, tr.SNAT, tr.Service, bridgeIP)
	}
	for _, want := range []string{"KUBE-NODE-PORT", ipvs.Table, "KUBE-POSTROUTING"} {
		if !visits(tr, want) {
			t.Errorf("the trace never visits %s", want)
		}
	}
	if len(tr.Endpoints) != len(pods) {
		t.Fatalf("trace endpoints %+v; want the %d pods", tr.Endpoints, len(pods))
	}
	order := make([]string, len(pods)) // pod by turn
	for _, e := range tr.Endpoints {
		if e.Probability < 0.333 || e.Probability > 0.334 || e.Turn < 1 || e.Turn > len(pods) {
			t.Fatalf("endpoint %+v: want probability 1/3 and a turn (a fresh rr service starts at the head of its list)", e)
		}
		order[e.Turn-1] = e.Pod
	}

	// What the kernel does: six connections from the client take the pods in the predicted turns, and each
	// pod sees the node's address (the NodePort traffic is masqueraded).
	sports := []int{40001, 40002, 40003, 40004, 40005, 40006}
	for i, sport := range sports {
		var pod, seen string
		inNamespace(t, client, func() { pod, seen, err = podserver.Get(ctx, dst, sport) })
		must(t, err)
		if want := order[i%len(order)]; pod != want {
			t.Errorf("connection %d (from port %d) was answered by %s; the trace's round robin order %v says %s", i+1, sport, pod, order, want)
		}
		if host, _, _ := net.SplitHostPort(seen); host != tr.SNAT {
			t.Errorf("connection %d: %s saw the client as %s; the trace says %s", i+1, pod, seen, tr.SNAT)
		}
	}

	// The kernel's connection entries agree: each client port went through the NodePort virtual server to the
	// pod that answered it.
	after := collect(t)
	if *capture {
		conns, err := os.ReadFile("/proc/net/ip_vs_conn")
		must(t, err)
		fmt.Printf("=== capture ip_vs_conn-after.txt\n%s=== end\n", conns)
		out, err := exec.Command("ipvsadm", "-Lnc").CombinedOutput()
		must(t, err)
		fmt.Printf("=== capture ipvsadm-Lnc-after.txt\n%s=== end\n", out)
		fmt.Printf("=== capture snapshot-after.json\n%s\n=== end\n", jsonOf(after))
	}
	byPod := map[string]string{}
	for _, p := range pods {
		byPod[p.ip+":8080"] = "default/" + p.name
	}
	for i, sport := range sports {
		c, ok := stateOf(t, after).Connection("TCP", netip.MustParseAddrPort(fmt.Sprintf("%s:%d", clientIP, sport)), netip.MustParseAddrPort(dst))
		if !ok {
			t.Errorf("no IPVS connection entry for client port %d; entries: %+v", sport, stateOf(t, after).Connections)
			continue
		}
		if got, want := byPod[c.Dest.String()], order[i%len(order)]; got != want {
			t.Errorf("IPVS entry for port %d goes to %s (%s); want %s", sport, c.Dest, got, want)
		}
		// A trace of that same flow is decided by its entry.
		again, err := tracer.Trace(after, tracer.Request{Dst: dst, Src: fmt.Sprintf("%s:%d", clientIP, sport)})
		must(t, err)
		if len(again.Endpoints) != 1 || again.Endpoints[0].Addr() != c.Dest.String() {
			t.Errorf("trace of the existing flow from port %d: endpoints %+v; want only %s (its IPVS entry)", sport, again.Endpoints, c.Dest)
		}
	}

	// The kernel's counters (its estimator refreshes them every 2 s) now tell whose turn is next: two full
	// rounds were made, so it is the first pod again; one more connection proves it.
	time.Sleep(2500 * time.Millisecond)
	next, err := tracer.Trace(collect(t), tracer.Request{Dst: dst, Src: clientIP + ":40100"})
	must(t, err)
	first := ""
	for _, e := range next.Endpoints {
		if e.Turn == 1 {
			first = e.Pod
		}
	}
	var pod string
	inNamespace(t, client, func() { pod, _, err = podserver.Get(ctx, dst, 40007) })
	must(t, err)
	if first == "" || pod != first {
		t.Errorf("after 6 connections the trace says %q is next; the kernel sent the 7th to %s", first, pod)
	}

	// The rules around IPVS, as the kernel's own trace reports them for one more connection, are the rules the
	// prediction walks (what `trace --verify` compares on a lab node).
	const sport = 40200
	traced := collect(t)
	pred, err := tracer.Trace(traced, tracer.Request{Dst: dst, Src: fmt.Sprintf("%s:%d", clientIP, sport)})
	must(t, err)
	flow := trace.Flow{Src: netip.MustParseAddr(clientIP), Dst: netip.MustParseAddr(nodeIP), Sport: sport, Dport: nodePort, Proto: "tcp"}
	session, err := kerneltrace.Start(ctx, "iptables", flow)
	must(t, err)
	var seen string
	inNamespace(t, client, func() { pod, seen, err = podserver.Get(ctx, dst, sport) })
	lines, stopErr := session.Stop()
	must(t, err)
	must(t, stopErr)
	if *capture {
		fmt.Printf("=== capture xtables-monitor-trace.txt\n%s\n=== end\n", strings.Join(lines, "\n"))
		fmt.Printf("=== capture snapshot-traced.json\n%s\n=== end\n", jsonOf(traced))
	}
	v := tracer.Compare(pred, kerneltrace.ParseXtables(lines, flow), trace.Connection{Answered: true, Pod: strings.TrimPrefix(pod, "default/"), Client: seen})
	if v.Result != "agree" {
		t.Errorf("the kernel's trace of the connection from port %d disagrees with the prediction: %v\n%s", sport, v.Reasons, jsonOf(v.Rows))
	}
}

func visits(tr *trace.Trace, what string) bool {
	for _, p := range tr.Paths {
		for _, h := range p.Hops {
			if h.Matched && (h.Table == what || strings.Contains(h.Chain, what) || strings.Contains(h.Text, what)) {
				return true
			}
		}
	}
	return false
}

func collect(t *testing.T) *snapshot.Snapshot {
	t.Helper()
	s, err := snapshot.Collect(context.Background(), "")
	must(t, err)
	stateOf(t, s)
	s.Node, s.Dataplane, s.Kubernetes = "node", "ipvs", kubernetes()
	return s
}

// printCapture prints the listings the parser fixtures come from, between markers a script can cut on.
func printCapture(t *testing.T, s *snapshot.Snapshot) {
	for name, argv := range map[string][]string{
		"ipvsadm-Ln.txt":    {"ipvsadm", "-Ln"},
		"ipset-save.txt":    {"ipset", "save"},
		"iptables-save.txt": {"iptables-save"},
	} {
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		must(t, err)
		fmt.Printf("=== capture %s\n%s=== end\n", name, out)
	}
	conns, err := os.ReadFile("/proc/net/ip_vs_conn")
	must(t, err)
	fmt.Printf("=== capture ip_vs_conn.txt\n%s=== end\n", conns)
	fmt.Printf("=== capture snapshot.json\n%s\n=== end\n", jsonOf(s))
}

func jsonOf(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// newNamespace makes a network namespace; the handle keeps it alive for the guest's life.
func newNamespace(t *testing.T) netns.NsHandle {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	must(t, err)
	defer orig.Close()
	ns, err := netns.New()
	must(t, err)
	must(t, netns.Set(orig))
	return ns
}

// inNamespace runs fn on a thread inside ns: sockets it opens belong to ns.
func inNamespace(t *testing.T, ns netns.NsHandle, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	must(t, err)
	defer orig.Close()
	must(t, netns.Set(ns))
	defer netns.Set(orig)
	fn()
}

func moveAndAddress(t *testing.T, link string, ns netns.NsHandle, rename, cidr, gateway string) {
	t.Helper()
	l, err := netlink.LinkByName(link)
	must(t, err)
	must(t, netlink.LinkSetNsFd(l, int(ns)))
	inNamespace(t, ns, func() {
		l, err := netlink.LinkByName(link)
		must(t, err)
		must(t, netlink.LinkSetName(l, rename))
		address(t, rename, cidr)
		up(t, "lo")
		if gateway != "" {
			must(t, netlink.RouteAdd(&netlink.Route{Gw: net.ParseIP(gateway)}))
		}
	})
}

func address(t *testing.T, link, cidr string) {
	t.Helper()
	l, err := netlink.LinkByName(link)
	must(t, err)
	a, err := netlink.ParseAddr(cidr)
	must(t, err)
	must(t, netlink.AddrAdd(l, a))
	must(t, netlink.LinkSetUp(l))
}

func up(t *testing.T, link string) {
	t.Helper()
	l, err := netlink.LinkByName(link)
	must(t, err)
	must(t, netlink.LinkSetUp(l))
}
