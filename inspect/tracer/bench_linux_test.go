package tracer_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/internal/e2etest"
)

// BenchmarkTraceLive builds a one-node lab whose real proxier holds N NodePort Services × 3 endpoints (N: 5,000,
// or $K8SGUIDE_BENCH_SERVICES, a comma-separated list), then measures `k8sguide trace --node` (collect a
// snapshot in the node, trace a NodePort packet through it, with the Kubernetes names), the whole process, beside
// its floor, the node's own listing tool: `iptables-save` (iptables mode) or `nft list ruleset` (nftables mode)
// run in the node, interleaved with it; medians of 5 runs each (internal/benchtable's units).
func BenchmarkTraceLive(b *testing.B) {
	sizes := benchSizes(b)
	for _, d := range []dataplanes.Name{dataplanes.IPTables, dataplanes.NFTables} {
		for _, n := range sizes {
			b.Run(fmt.Sprintf("%s/%d", d, n), func(b *testing.B) {
				e2etest.NeedRoot(b, e2etest.ToolFor(d))
				file := filepath.Join(b.TempDir(), "services.yaml")
				if err := os.WriteFile(file, []byte(e2etest.ServicesManifest(n, "NodePort")), 0o644); err != nil {
					b.Fatal(err)
				}
				name := "bench-trc-" + string(d)[:3]
				b.StopTimer()
				e2etest.UpLab(b, name, "--dataplane", string(d), "--workers", "0", "--service-node-port-range", "30000-59999")
				e2etest.MustK8sguide(b, "deploy", "--name", name, file)
				node := name + "-control-plane"
				np := e2etest.NodePortOf(b, name, fmt.Sprintf("svc-%d", n-1))
				save := []string{"ip", "netns", "exec", node, "iptables-save"}
				if d == dataplanes.NFTables {
					save = []string{"ip", "netns", "exec", node, "nft", "list", "ruleset"}
				}
				trace := []string{e2etest.Binary, "trace", "--name", name, "--node", node, "--dst", "172.18.0.2:" + np, "-o", "json"}
				var figs []e2etest.Figures
				b.StartTimer()
				for i := 0; i < b.N; i++ {
					var err error
					if figs, err = e2etest.Medians(5, trace, save); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				e2etest.ReportFigures(b, n, figs[0], figs[1])
			})
		}
	}
}

// benchSizes are the numbers of Services the scale benchmarks run at: $K8SGUIDE_BENCH_SERVICES (comma-separated),
// else 5,000.
func benchSizes(b *testing.B) []int {
	v := os.Getenv("K8SGUIDE_BENCH_SERVICES")
	if v == "" {
		return []int{5000}
	}
	var sizes []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 30000 {
			b.Fatalf("K8SGUIDE_BENCH_SERVICES=%q: want numbers of Services from 1 to 30000, comma-separated", v)
		}
		sizes = append(sizes, n)
	}
	return sizes
}

// measureTrace times one `k8sguide trace --node NODE --dst DST -o json` (with the benchmark's timer running
// only around it) and returns its wall time and its peak memory in KB, as e2etest.Measure reports it.
func measureTrace(b *testing.B, name, node, dst string) (time.Duration, int64) {
	b.Helper()
	start := time.Now()
	b.StartTimer()
	out, peakKB, err := e2etest.Measure(e2etest.Binary, "trace", "--name", name, "--node", node, "--dst", dst, "-o", "json")
	b.StopTimer()
	took := time.Since(start)
	if err != nil {
		b.Fatalf("%v: %s", err, out)
	}
	return took, peakKB
}

// BenchmarkTraceEBPF5000 builds a one-node ebpf lab whose Cilium maps hold 5,000 NodePort Services × 3
// endpoints (20,000 frontends: ClusterIP, node address and 0.0.0.0 per Service, 80,000 service-map entries),
// then times `k8sguide trace --node` (collect the maps, walk a NodePort packet) and `k8sguide lb list`, with
// the trace's peak memory.
func BenchmarkTraceEBPF5000(b *testing.B) {
	b.StopTimer() // ns/op is the trace alone: not the agent's build, the lab or the deploy
	e2etest.NeedRoot(b)
	e2etest.NeedEBPF(b)
	file := filepath.Join(b.TempDir(), "services.yaml")
	if err := os.WriteFile(file, []byte(e2etest.ServicesManifest(5000, "NodePort")), 0o644); err != nil {
		b.Fatal(err)
	}
	name := "bench-trc-ebp"
	e2etest.UpLab(b, name, "--dataplane", "ebpf", "--workers", "0", "--service-node-port-range", "30000-39999")
	start := time.Now()
	e2etest.MustK8sguide(b, "deploy", "--name", name, file)
	b.ReportMetric(float64(time.Since(start).Milliseconds()), "deploy-ms")
	node := name + "-control-plane"
	np := e2etest.NodePortOf(b, name, "svc-4999")
	var traceTime, listTime time.Duration
	var peak int64
	for i := 0; i < b.N; i++ {
		took, peakKB := measureTrace(b, name, node, "172.18.0.2:"+np)
		traceTime += took
		peak = max(peak, peakKB)
		start := time.Now()
		if _, err := e2etest.Quiet("lb", "list", "--name", name, "--node", node); err != nil {
			b.Fatal(err)
		}
		listTime += time.Since(start)
	}
	n := float64(b.N)
	b.ReportMetric(float64(traceTime.Milliseconds())/n, "trace-ms")
	b.ReportMetric(float64(listTime.Milliseconds())/n, "lblist-ms")
	b.ReportMetric(float64(peak)/1024, "peak-MB")
}
