package tracer_test

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/inspect/tracer"
	"github.com/k8sguide/k8sguide/internal/e2etest"
)

// BenchmarkTraceOffline measures what an SRE pays for `k8sguide trace --snapshot FILE --dst NODEIP:NODEPORT` of
// a big cluster's dump: N NodePort Services × 3 endpoints (N: 5,000, or $K8SGUIDE_BENCH_SERVICES), for the
// real proxier's iptables-save (iptables mode) or `nft list ruleset` (nftables mode) output ("dump") and for a
// k8sguide snapshot of the same node ("snapshot"). Each is the whole process, medians of 5 runs, beside
// `k8sguide --help` interleaved with it: what every command pays to start, so that own-ms and own-MB are the
// trace's own cost. "parse" is the same dump read and walked in this process: ns/op, what it allocates
// (alloc-MB) and what it holds once walked (live-MB).
//
// The dumps come from a one-node netns lab (root) holding the Services, which is removed before anything is
// measured. With $K8SGUIDE_BENCH_DUMPS=DIR they are kept there, and a later run takes them from there (no lab).
func BenchmarkTraceOffline(b *testing.B) {
	sizes := benchSizes(b)
	for _, d := range []dataplanes.Name{dataplanes.IPTables, dataplanes.NFTables} {
		for _, n := range sizes {
			b.Run(fmt.Sprintf("%s/%d", d, n), func(b *testing.B) {
				dumps := offlineDumps(b, d, n)
				help := []string{e2etest.Binary, "--help"}
				for _, in := range []struct {
					name, file string
					local      bool // the dump does not say which addresses are the node's: --local-addresses does
				}{{"dump", dumps.dump, true}, {"snapshot", dumps.snapshot, false}} {
					b.Run(in.name, func(b *testing.B) {
						trace := []string{e2etest.Binary, "trace", "--snapshot", in.file, "--dst", dumps.dst.String()}
						if in.local {
							trace = append(trace, "--local-addresses", dumps.dst.Addr().String())
						}
						var figs []e2etest.Figures
						for i := 0; i < b.N; i++ {
							uncache(b, e2etest.Binary)
							var err error
							if figs, err = e2etest.Medians(5, trace, help); err != nil {
								b.Fatal(err)
							}
						}
						e2etest.ReportFigures(b, n, figs[0], figs[1])
						b.ReportMetric(float64((figs[0].Wall-figs[1].Wall).Microseconds())/1000, "own-ms")
						b.ReportMetric(float64(figs[0].PeakKB-figs[1].PeakKB)/1024, "own-MB")
						if st, err := os.Stat(in.file); err == nil {
							b.ReportMetric(float64(st.Size())/(1<<20), "file-MB")
						}
					})
				}
				b.Run("parse", func(b *testing.B) {
					req := tracer.Request{Dst: dumps.dst.String()}
					local := []netip.Addr{dumps.dst.Addr()}
					var before, after runtime.MemStats
					runtime.GC()
					runtime.ReadMemStats(&before)
					var keep any
					for i := 0; i < b.N; i++ {
						s, err := tracer.LoadFile(dumps.dump, nil, local)
						if err != nil {
							b.Fatal(err)
						}
						op := tracer.Open(s)
						t, err := op.Trace(req)
						if err != nil {
							b.Fatal(err)
						}
						keep = []any{s, op, t}
					}
					b.StopTimer()
					runtime.ReadMemStats(&after)
					alloc := after.TotalAlloc - before.TotalAlloc
					runtime.GC()
					runtime.ReadMemStats(&after)
					runtime.KeepAlive(keep)
					b.ReportMetric(float64(alloc)/float64(b.N)/(1<<20), "alloc-MB")
					b.ReportMetric((float64(after.HeapAlloc)-float64(before.HeapAlloc))/(1<<20), "live-MB")
				})
			})
		}
	}
}

// uncache drops a file's pages from the page cache. A binary just built is cached as it was written, in pages
// the kernel then maps many at a time: `k8sguide --help` reads 45 MB resident from a fresh build and 33 MB from
// the same file read back from disk, as an installed binary is, and the difference is no part of what a command
// costs. The first of the interleaved runs reads it back (the medians leave that run's wait out).
func uncache(b *testing.B, path string) {
	b.Helper()
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		b.Fatal(err)
	}
}

// dumpSet is one node's dump, its snapshot, and the NodePort of its last Service on its address.
type dumpSet struct {
	dump, snapshot string
	dst            netip.AddrPort
}

// offlineDumps takes a dump set from $K8SGUIDE_BENCH_DUMPS when it holds one for d and n, and otherwise makes it
// from a lab (root), into that directory or the benchmark's own.
func offlineDumps(b *testing.B, d dataplanes.Name, n int) dumpSet {
	b.Helper()
	dir := os.Getenv("K8SGUIDE_BENCH_DUMPS")
	if dir == "" {
		dir = b.TempDir()
	}
	base := filepath.Join(dir, fmt.Sprintf("%s-%d", d, n))
	set := dumpSet{dump: base + ".dump", snapshot: base + ".snapshot.json"}
	if dst, err := os.ReadFile(base + ".dst"); err == nil {
		if set.dst, err = netip.ParseAddrPort(strings.TrimSpace(string(dst))); err == nil {
			return set
		}
	}
	e2etest.NeedRoot(b, e2etest.ToolFor(d))
	manifest := filepath.Join(b.TempDir(), "services.yaml")
	if err := os.WriteFile(manifest, []byte(e2etest.ServicesManifest(n, "NodePort")), 0o644); err != nil {
		b.Fatal(err)
	}
	name := "bench-off-" + string(d)[:3]
	e2etest.UpLab(b, name, "--dataplane", string(d), "--workers", "0", "--service-node-port-range", "30000-59999")
	e2etest.MustK8sguide(b, "deploy", "--name", name, manifest)
	node := name + "-control-plane"
	// node-ip prints "control-plane:IP".
	_, ip, _ := strings.Cut(strings.TrimSpace(e2etest.MustK8sguide(b, "node-ip", "--name", name, "1")), ":")
	dst, err := netip.ParseAddrPort(ip + ":" + e2etest.NodePortOf(b, name, fmt.Sprintf("svc-%d", n-1)))
	if err != nil {
		b.Fatal(err)
	}
	save := []string{"iptables-save"}
	if d == dataplanes.NFTables {
		save = []string{"nft", "list", "ruleset"}
	}
	dump := e2etest.MustK8sguide(b, append([]string{"exec", "--name", name, node, "--"}, save...)...)
	if err := os.WriteFile(set.dump, []byte(dump), 0o644); err != nil {
		b.Fatal(err)
	}
	e2etest.MustK8sguide(b, "snapshot", "--name", name, "--node", node, "-o", set.snapshot)
	// Nothing of the lab runs while the trace is measured.
	e2etest.MustK8sguide(b, "down", "--name", name)
	if err := os.WriteFile(base+".dst", []byte(dst.String()+"\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	set.dst = dst
	return set
}
