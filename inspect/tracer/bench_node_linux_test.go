package tracer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/engines"
	"github.com/k8sguide/k8sguide/dataplanes/kubeproxy"
	"github.com/k8sguide/k8sguide/inspect/tracer"
	"github.com/k8sguide/k8sguide/internal/e2etest"
)

// A node the benchmarks make without a lab, for sizes a lab's control plane takes too long to deploy (20,000
// Services: its apply is quadratic, see docs/development.md's Benchmarks): a network namespace whose kernel holds what
// the upstream proxier (dataplanes/kubeproxy, as the lab's nodes run it) writes for N NodePort Services × 3
// endpoints, handed to it as kube-proxy's informers would hand them. No control plane, no pods: the rules are
// the real proxier's, the Kubernetes names are absent.
const (
	// proxierEnv makes the test binary that proxier (TestMain): "DATAPLANE/N", run inside the namespace.
	proxierEnv  = "K8SGUIDE_BENCH_PROXIER"
	benchNodeIP = "172.18.0.2"
)

// runProxier is the test binary as a node's proxier (proxierEnv): it writes the rules of spec's Services into
// the kernel of the namespace it runs in and exits; the rules stay with the namespace.
func runProxier(spec string) int {
	d, count, _ := strings.Cut(spec, "/")
	n, err := strconv.Atoi(count)
	if err != nil {
		fmt.Fprintln(os.Stderr, proxierEnv+":", err)
		return 1
	}
	face, _ := engines.Lab(dataplanes.Name(d))
	p, err := kubeproxy.New(context.Background(), face.KubeProxyMode, kubeproxy.NodeConfig{
		NodeName: "bench", NodeIP: net.ParseIP(benchNodeIP), ClusterCIDR: "10.244.0.0/16",
		SyncPeriod: time.Hour, Logger: klog.Background(),
	}, map[string]string{v1.LabelHostname: "bench"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	svcs, slices := benchServices(n)
	start := time.Now()
	p.Apply(svcs, slices)
	fmt.Printf("%d\n", time.Since(start).Milliseconds())
	return 0
}

// benchServices are n NodePort Services (svc-0 … svc-N-1, NodePorts from 30000) whose EndpointSlices hold the
// same 3 ready endpoints, as e2etest.ServicesManifest's Services select the 3 pods of web.
func benchServices(n int) ([]v1.Service, []discoveryv1.EndpointSlice) {
	ready, node, port, proto, portName := true, "bench", int32(80), v1.ProtocolTCP, ""
	var svcs []v1.Service
	var slices []discoveryv1.EndpointSlice
	base := netip.MustParseAddr("10.96.0.10").As4()
	for i := range n {
		ip := netip.AddrFrom4([4]byte{base[0], base[1] + byte(i>>16), byte(i >> 8), byte(i)}).Next().Next()
		name := fmt.Sprintf("svc-%d", i)
		svcs = append(svcs, v1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: v1.ServiceSpec{Type: v1.ServiceTypeNodePort, ClusterIP: ip.String(), ClusterIPs: []string{ip.String()},
				IPFamilies: []v1.IPFamily{v1.IPv4Protocol}, ExternalTrafficPolicy: v1.ServiceExternalTrafficPolicyCluster,
				Ports: []v1.ServicePort{{Protocol: proto, Port: port, TargetPort: intstr.FromInt32(port), NodePort: int32(30000 + i)}}},
		})
		slice := discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name + "-bench",
				Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port, Protocol: &proto}},
		}
		for e := range 3 {
			slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.244.0.%d", e+2)},
				NodeName: &node, Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &ready}})
		}
		slices = append(slices, slice)
	}
	return svcs, slices
}

// proxierNode makes the namespace (removed by the cleanup it registers on owner) with the node's address on eth0
// and the pods' subnet on cni0 (veth pairs whose peers stay in it: nothing is sent), runs the proxier in it for n
// Services, and returns the namespace's name, the last Service's NodePort on the node's address and how long the
// proxier's sync took (ms).
func proxierNode(owner *testing.B, d dataplanes.Name, n int) (string, netip.AddrPort, int, error) {
	ns := fmt.Sprintf("bench-kp-%s-%d-%d", string(d)[:3], n, os.Getpid())
	run := func(argv ...string) error {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, out)
		}
		return nil
	}
	if err := run("ip", "netns", "add", ns); err != nil {
		return "", netip.AddrPort{}, 0, err
	}
	owner.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	steps := [][]string{{"ip", "-n", ns, "link", "set", "lo", "up"}}
	for _, l := range []struct{ dev, addr string }{{"eth0", benchNodeIP + "/16"}, {"cni0", "10.244.0.1/24"}} {
		steps = append(steps, []string{"ip", "-n", ns, "link", "add", l.dev, "type", "veth", "peer", "name", l.dev + "p"},
			[]string{"ip", "-n", ns, "addr", "add", l.addr, "dev", l.dev},
			[]string{"ip", "-n", ns, "link", "set", l.dev, "up"}, []string{"ip", "-n", ns, "link", "set", l.dev + "p", "up"})
	}
	for _, argv := range steps {
		if err := run(argv...); err != nil {
			return "", netip.AddrPort{}, 0, err
		}
	}
	cmd := exec.Command("ip", "netns", "exec", ns, os.Args[0])
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s/%d", proxierEnv, d, n))
	out, err := cmd.Output()
	if err != nil {
		return "", netip.AddrPort{}, 0, fmt.Errorf("the %s proxier for %d Services: %v", d, n, err)
	}
	ms, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	return ns, netip.MustParseAddrPort(fmt.Sprintf("%s:%d", benchNodeIP, 30000+n-1)), ms, nil
}

// BenchmarkTraceNode measures, on a proxier-only node (proxierNode) of N Services (5,000, or
// $K8SGUIDE_BENCH_SERVICES: 20,000 takes a minute or two here, where a lab's deploy would take an hour):
//   - live/DATAPLANE/N: what a live `trace --node -o json` runs, less the lab's Kubernetes names: the collector
//     in the node reading for the packet (`k8sguide internal collect --for`), then the trace of what it read;
//     beside the node's listing tool, interleaved; sync-ms is the proxier's first sync of the N Services;
//   - offline/DATAPLANE/N: `trace --snapshot` of that tool's output (the dump an SRE pastes), beside
//     `k8sguide --help`.
func BenchmarkTraceNode(b *testing.B) {
	outer := b
	type node struct {
		ns      string
		dst     netip.AddrPort
		syncMS  int
		save    []string
		dump    string
		dumpLen int
	}
	nodes := map[string]*node{}
	nodeFor := func(b *testing.B, d dataplanes.Name, n int) *node {
		key := fmt.Sprintf("%s/%d", d, n)
		if nd := nodes[key]; nd != nil {
			return nd
		}
		e2etest.NeedRoot(b, e2etest.ToolFor(d))
		nd := &node{}
		var err error
		// The node serves both sub-benchmarks of its size: the outer benchmark removes it.
		if nd.ns, nd.dst, nd.syncMS, err = proxierNode(outer, d, n); err != nil {
			b.Fatal(err)
		}
		nd.save = []string{"ip", "netns", "exec", nd.ns, "iptables-save"}
		if d == dataplanes.NFTables {
			nd.save = []string{"ip", "netns", "exec", nd.ns, "nft", "list", "ruleset"}
		}
		dump, err := exec.Command(nd.save[0], nd.save[1:]...).Output()
		if err != nil {
			b.Fatal(err)
		}
		nd.dump, nd.dumpLen = filepath.Join(outer.TempDir(), strings.ReplaceAll(key, "/", "-")+".dump"), len(dump)
		if err := os.WriteFile(nd.dump, dump, 0o644); err != nil {
			b.Fatal(err)
		}
		nodes[key] = nd
		return nd
	}
	for _, d := range []dataplanes.Name{dataplanes.IPTables, dataplanes.NFTables} {
		for _, n := range benchSizes(b) {
			b.Run(fmt.Sprintf("live/%s/%d", d, n), func(b *testing.B) {
				b.StopTimer()
				nd := nodeFor(b, d, n)
				scope, err := json.Marshal(tracer.ScopeRequest{Request: tracer.Request{Dst: nd.dst.String()}})
				if err != nil {
					b.Fatal(err)
				}
				part := filepath.Join(b.TempDir(), "part.json")
				// The two processes a live trace runs, in one shell so that GNU time counts both. The words are
				// the benchmark's own (the request is JSON without a quote).
				live := []string{"sh", "-c", fmt.Sprintf("ip netns exec %s %s internal collect --for '%s' > %s && %s trace --snapshot %s --dst %s -o json > /dev/null",
					nd.ns, e2etest.Binary, scope, part, e2etest.Binary, part, nd.dst)}
				var figs []e2etest.Figures
				for i := 0; i < b.N; i++ {
					if figs, err = e2etest.Medians(5, live, nd.save); err != nil {
						b.Fatal(err)
					}
				}
				e2etest.ReportFigures(b, n, figs[0], figs[1])
				b.ReportMetric(float64(nd.syncMS), "sync-ms")
			})
			b.Run(fmt.Sprintf("offline/%s/%d", d, n), func(b *testing.B) {
				b.StopTimer()
				nd := nodeFor(b, d, n)
				offline := []string{e2etest.Binary, "trace", "--snapshot", nd.dump, "--dst", nd.dst.String(),
					"--local-addresses", nd.dst.Addr().String(), "-o", "json"}
				var figs []e2etest.Figures
				var err error
				for i := 0; i < b.N; i++ {
					uncache(b, e2etest.Binary)
					if figs, err = e2etest.Medians(5, offline, []string{e2etest.Binary, "--help"}); err != nil {
						b.Fatal(err)
					}
				}
				e2etest.ReportFigures(b, n, figs[0], figs[1])
				b.ReportMetric(float64(nd.dumpLen)/(1<<20), "file-MB")
			})
		}
	}
}
