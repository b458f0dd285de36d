package netns_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/ebpf/datapath"
	"github.com/k8sguide/k8sguide/internal/e2etest"
)

// Benchmarks print the figures `make bench` reports. They time the real CLI on real namespaces.

func BenchmarkUp(b *testing.B) {
	for _, d := range []dataplanes.Name{dataplanes.IPTables, dataplanes.NFTables} {
		b.Run(string(d), func(b *testing.B) {
			needRoot(b, toolFor(d))
			name := "bench-up-" + string(d)[:3]
			for i := 0; i < b.N; i++ {
				b.StartTimer()
				mustK8sguide(b, "up", "--name", name, "--dataplane", string(d))
				b.StopTimer()
				mustK8sguide(b, "down", "--name", name)
			}
			assertNothingLeft(b, name)
		})
	}
}

// BenchmarkUpEBPF times `up --dataplane ebpf`: cold compiles bpf_host for the three nodes (a fresh object
// cache each iteration), then loads and attaches it; warm reuses the compiled objects, as a second lab does.
func BenchmarkUpEBPF(b *testing.B) {
	for _, cache := range []string{"cold", "warm"} {
		b.Run(cache, func(b *testing.B) {
			needRoot(b)
			e2etest.NeedEBPF(b)
			name := "bench-up-ebp"
			dir := b.TempDir()
			b.Setenv(datapath.CacheEnv, dir)
			b.StopTimer()
			if cache == "warm" {
				mustK8sguide(b, "up", "--name", name, "--dataplane", "ebpf")
				mustK8sguide(b, "down", "--name", name)
			}
			b.StartTimer()
			for i := 0; i < b.N; i++ {
				if cache == "cold" {
					b.StopTimer()
					os.RemoveAll(dir)
					b.StartTimer()
				}
				mustK8sguide(b, "up", "--name", name, "--dataplane", "ebpf")
				b.StopTimer()
				mustK8sguide(b, "down", "--name", name)
				b.StartTimer()
			}
			assertNothingLeft(b, name)
		})
	}
}

func BenchmarkDeployAndNodePort(b *testing.B) {
	for _, d := range []dataplanes.Name{dataplanes.IPTables, dataplanes.NFTables} {
		b.Run(string(d), func(b *testing.B) {
			needRoot(b, toolFor(d))
			name := "bench-dnp-" + string(d)[:3]
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				mustK8sguide(b, "up", "--name", name, "--dataplane", string(d))
				b.StartTimer()
				mustK8sguide(b, "deploy", "--name", name)
				mustK8sguide(b, "nodeport", "--name", name, "--check", "1")
				b.StopTimer()
				mustK8sguide(b, "down", "--name", name)
			}
			assertNothingLeft(b, name)
		})
	}
}

// BenchmarkProxierSync1000 applies 1,000 ClusterIP Services (each with the web Deployment's 3 endpoints) to a
// one-node lab through the apiserver (server-side apply) and reports kube-proxy's own time per sync while it
// took them (sync-ms: kubeproxy_sync_proxy_rules_duration_seconds, its sum over its count for the syncs the
// deploy caused); ns/op is the whole `deploy`, including the wait until the node's rules serve every Service.
func BenchmarkProxierSync1000(b *testing.B) {
	file := filepath.Join(b.TempDir(), "services.yaml")
	if err := os.WriteFile(file, []byte(e2etest.ServicesManifest(1000, "ClusterIP")), 0o644); err != nil {
		b.Fatal(err)
	}
	for _, d := range []dataplanes.Name{dataplanes.IPTables, dataplanes.NFTables} {
		b.Run(string(d), func(b *testing.B) {
			needRoot(b, toolFor(d))
			name := "bench-sync-" + string(d)[:3]
			var sync time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				mustK8sguide(b, "up", "--name", name, "--dataplane", string(d), "--workers", "0")
				node := name + "-control-plane"
				sum0, n0 := syncMetric(b, name, node)
				b.StartTimer()
				mustK8sguide(b, "deploy", "--name", name, file)
				b.StopTimer()
				sum1, n1 := syncMetric(b, name, node)
				if n1 > n0 {
					sync += time.Duration((sum1 - sum0) / (n1 - n0) * float64(time.Second))
				}
				mustK8sguide(b, "down", "--name", name)
			}
			b.ReportMetric(float64(sync.Milliseconds())/float64(b.N), "sync-ms")
			assertNothingLeft(b, name)
		})
	}
}

// syncMetric reads kube-proxy's sync duration histogram (sum in seconds, count) from its metrics port in node.
func syncMetric(b *testing.B, name, node string) (sum, count float64) {
	b.Helper()
	out := mustK8sguide(b, "exec", "--name", name, node, "--", "curl", "-s", "http://127.0.0.1:10249/metrics")
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		switch f[0] {
		case "kubeproxy_sync_proxy_rules_duration_seconds_sum":
			sum, _ = strconv.ParseFloat(f[1], 64)
		case "kubeproxy_sync_proxy_rules_duration_seconds_count":
			count, _ = strconv.ParseFloat(f[1], 64)
		}
	}
	return sum, count
}
