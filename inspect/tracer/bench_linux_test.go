package tracer_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/internal/e2etest"
)

// BenchmarkTrace5000 builds a one-node lab whose real proxier holds 5,000 NodePort Services × 3 endpoints,
// then times, per iteration, `iptables-save` (iptables mode) or `nft list ruleset` (nftables mode) alone in
// the node, and `k8sguide trace --node` (collect a snapshot, then trace a NodePort packet through it). It
// reports both in ms, their ratio, and the peak memory: the largest max RSS of the trace process and every
// process under it (the collector, nft, iptables-save), measured from a small parent (e2etest.Measure), as
// /usr/bin/time would. Goal: ratio ≤ 1.2, peak ≤ 150 MB.
func BenchmarkTrace5000(b *testing.B) {
	file := filepath.Join(b.TempDir(), "services.yaml")
	if err := os.WriteFile(file, []byte(e2etest.ServicesManifest(5000, "NodePort")), 0o644); err != nil {
		b.Fatal(err)
	}
	for _, d := range []dataplanes.Name{dataplanes.IPTables, dataplanes.NFTables} {
		b.Run(string(d), func(b *testing.B) {
			e2etest.NeedRoot(b, e2etest.ToolFor(d))
			name := "bench-trc-" + string(d)[:3]
			b.StopTimer()
			e2etest.UpLab(b, name, "--dataplane", string(d), "--workers", "0", "--service-node-port-range", "30000-39999")
			e2etest.MustK8sguide(b, "deploy", "--name", name, file)
			node := name + "-control-plane"
			np := e2etest.NodePortOf(b, name, "svc-4999")
			save := []string{"iptables-save"}
			if d == dataplanes.NFTables {
				save = []string{"nft", "list", "ruleset"}
			}
			var saveTime, traceTime time.Duration
			var peak int64
			for i := 0; i < b.N; i++ {
				start := time.Now()
				if err := exec.Command("ip", append([]string{"netns", "exec", node}, save...)...).Run(); err != nil {
					b.Fatal(err)
				}
				saveTime += time.Since(start)
				took, peakKB := measureTrace(b, name, node, "172.18.0.2:"+np)
				traceTime += took
				peak = max(peak, peakKB)
			}
			n := float64(b.N)
			b.ReportMetric(float64(saveTime.Milliseconds())/n, "save-ms")
			b.ReportMetric(float64(traceTime.Milliseconds())/n, "trace-ms")
			b.ReportMetric(float64(traceTime)/float64(saveTime), "trace/save")
			b.ReportMetric(float64(peak)/1024, "peak-MB")
		})
	}
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
