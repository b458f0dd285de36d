package netns_test

import (
	"fmt"
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
			e2etest.DownAtCleanup(b, name)
			for i := 0; i < b.N; i++ {
				b.StartTimer()
				mustK8sguide(b, "up", "--name", name, "--dataplane", string(d))
				b.StopTimer()
				mustK8sguide(b, "down", "--name", name)
			}
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
			e2etest.DownAtCleanup(b, name)
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
		})
	}
}

func BenchmarkDeployAndNodePort(b *testing.B) {
	for _, d := range []dataplanes.Name{dataplanes.IPTables, dataplanes.NFTables} {
		b.Run(string(d), func(b *testing.B) {
			needRoot(b, toolFor(d))
			name := "bench-dnp-" + string(d)[:3]
			e2etest.DownAtCleanup(b, name)
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				mustK8sguide(b, "up", "--name", name, "--dataplane", string(d))
				b.StartTimer()
				mustK8sguide(b, "deploy", "--name", name)
				mustK8sguide(b, "nodeport", "--name", name, "--check", "1")
				b.StopTimer()
				mustK8sguide(b, "down", "--name", name)
			}
		})
	}
}

// BenchmarkDeployServices applies 1,000 and 5,000 ClusterIP Services (each with the web Deployment's 3
// endpoints) to a one-node lab through the apiserver (server-side apply, `k8sguide deploy FILE`) and reports:
//   - ns/op and deploy-ms: the whole `deploy`, up to the moment WaitServing found every Service in the node's
//     kernel;
//   - sync-ms: the proxy's own time per sync while it took them (kube-proxy: its
//     kubeproxy_sync_proxy_rules_duration_seconds, sum over count for the syncs the deploy caused; Cilium's
//     agent: the mean of the "sync" its "applied" log lines report for them);
//   - cp-up-MB and cp-MB: the control-plane process's resident memory (etcd, kube-apiserver,
//     kube-controller-manager, kube-scheduler in one process) after `up` and after the deploy.
//
// One node keeps the figure the proxy's and the apiserver's, not three proxies' competing for two cores.
func BenchmarkDeployServices(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		file := filepath.Join(b.TempDir(), "services.yaml")
		if err := os.WriteFile(file, []byte(e2etest.ServicesManifest(n, "ClusterIP")), 0o644); err != nil {
			b.Fatal(err)
		}
		for _, d := range []dataplanes.Name{dataplanes.IPTables, dataplanes.NFTables, dataplanes.EBPF} {
			b.Run(fmt.Sprintf("%s/%d", d, n), func(b *testing.B) {
				needRoot(b, toolFor(d))
				if d == dataplanes.EBPF {
					e2etest.NeedEBPF(b)
				}
				name := "bench-svc-" + string(d)[:3]
				e2etest.DownAtCleanup(b, name)
				node := name + "-control-plane"
				var sync time.Duration
				var syncs int
				var cpUp, cp int64
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					mustK8sguide(b, "up", "--name", name, "--dataplane", string(d), "--workers", "0")
					cpUp += residentKB(b, controlPlanePID(b, name))
					before := proxySyncs(b, d, name, node)
					b.StartTimer()
					mustK8sguide(b, "deploy", "--name", name, file)
					b.StopTimer()
					cp += residentKB(b, controlPlanePID(b, name))
					if took, ok := proxySyncs(b, d, name, node).since(before); ok {
						sync += took
						syncs++
					}
					mustK8sguide(b, "down", "--name", name)
				}
				N := float64(b.N)
				b.ReportMetric(float64(b.Elapsed().Milliseconds())/N, "deploy-ms")
				if syncs > 0 {
					b.ReportMetric(float64(sync.Milliseconds())/float64(syncs), "sync-ms")
				}
				b.ReportMetric(float64(cpUp)/1024/N, "cp-up-MB")
				b.ReportMetric(float64(cp)/1024/N, "cp-MB")
			})
		}
	}
}

// syncs is a proxy's running total of its syncs: their count and their summed duration.
type syncs struct {
	count float64
	total time.Duration
}

// since is the mean duration of the syncs made after earlier (false if there were none).
func (s syncs) since(earlier syncs) (time.Duration, bool) {
	if s.count <= earlier.count {
		return 0, false
	}
	return time.Duration(float64(s.total-earlier.total) / (s.count - earlier.count)), true
}

// proxySyncs reads the node's proxy's sync totals: kube-proxy's metrics, or the Cilium agent's log.
func proxySyncs(b *testing.B, d dataplanes.Name, name, node string) syncs {
	b.Helper()
	if d == dataplanes.EBPF {
		return ciliumSyncs(b, name, node)
	}
	sum, count := syncMetric(b, name, node)
	return syncs{count: count, total: time.Duration(sum * float64(time.Second))}
}

// ciliumSyncs sums the "sync" durations of the agent's "applied" lines (log/slog text) in the node's proxy
// log.
func ciliumSyncs(b *testing.B, name, node string) syncs {
	b.Helper()
	data, err := os.ReadFile(filepath.Join(e2etest.StateDir, name, "proxy-"+node+".log"))
	if err != nil {
		b.Fatal(err)
	}
	var s syncs
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.Contains(line, "msg=applied ") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "sync="); ok {
				if d, err := time.ParseDuration(v); err == nil {
					s.count++
					s.total += d
				}
			}
		}
	}
	return s
}

// residentKB is the process's resident memory (VmRSS), in KB.
func residentKB(b *testing.B, pid int) int64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb
		}
	}
	b.Fatalf("no VmRSS for pid %d", pid)
	return 0
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
		// The IPv4 proxier's: kube-proxy also runs an IPv6 one, which has no Services here.
		switch f[0] {
		case `kubeproxy_sync_proxy_rules_duration_seconds_sum{ip_family="IPv4"}`:
			sum, _ = strconv.ParseFloat(f[1], 64)
		case `kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv4"}`:
			count, _ = strconv.ParseFloat(f[1], 64)
		}
	}
	return sum, count
}
