package app

import (
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/inspect/live/livetest"
	"github.com/k8sguide/k8sguide/inspect/tracer"
	"github.com/k8sguide/k8sguide/lab/providers"
)

// fakeGoldLabs makes the labs the golden snapshots were taken of (gold-iptables, gold-nftables, gold-ebpf) the
// only labs there are, each with its worker2's snapshot: the commands that read a live lab then run without root,
// through inspect/live, against the same rules as the offline goldens.
func fakeGoldLabs(t *testing.T) *livetest.Provider {
	t.Helper()
	var labs []*livetest.Lab
	for _, dp := range []string{"iptables", "nftables", "ebpf"} {
		s, err := tracer.LoadFile("testdata/"+dp+"-worker2.v1.json", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		l, err := livetest.New(s.Lab, s)
		if err != nil {
			t.Fatal(err)
		}
		labs = append(labs, l)
	}
	p := livetest.NewProvider(labs...)
	t.Cleanup(providers.UseFake(p))
	return p
}

// liveGoldenCases are the commands a user runs against a lab, each naming its packet another way: every one goes
// through package request's node rule and inspect/live's collection.
func liveGoldenCases() []goldenCase {
	return []goldenCase{
		{"live-trace-nodeport.table", []string{"trace", "--name", "gold-iptables", "--dst", "172.18.0.4:31758"}},
		{"live-trace-service.table", []string{"trace", "--name", "gold-nftables", "--service", "web"}},
		{"live-trace-service-clusterip-from-deployment.table", []string{"trace", "--name", "gold-ebpf", "--service", "web", "--cluster-ip", "--from", "pod/web", "--node", "worker2"}},
		{"live-trace-service.json", []string{"trace", "--name", "gold-iptables", "--service", "default/web:80", "--node", "gold-iptables-worker2", "-o", "json"}},
		{"live-compare-service.table", []string{"compare", "--name", "gold-iptables", "--name", "gold-nftables", "--name", "gold-ebpf", "--service", "web"}},
		{"live-compare-clusterip-from-pod.table", []string{"compare", "--name", "gold-iptables", "--name", "gold-nftables", "--service", "web", "--cluster-ip", "--from", "pod/web", "--node", "worker2"}},
		{"error-live-clusterip-no-node", []string{"trace", "--name", "gold-iptables", "--dst", "10.96.99.110:80"}},
		{"error-live-no-such-node", []string{"trace", "--name", "gold-iptables", "--node", "worker9", "--dst", "10.96.99.110:80"}},
		{"error-live-pod-elsewhere", []string{"trace", "--name", "gold-iptables", "--node", "worker2", "--from", "pod/web-6b4fbbd7c4-frbn2", "--dst", "10.96.99.110:80"}},
		{"error-live-no-such-service", []string{"compare", "--name", "gold-iptables", "--name", "gold-nftables", "--service", "webb"}},
		{"error-live-no-such-lab", []string{"trace", "--name", "gold-ipvs", "--dst", "172.18.0.4:31758"}},
	}
}

// TestGoldenLive pins what trace and compare print against a lab (a fake one over the golden snapshots).
func TestGoldenLive(t *testing.T) {
	fakeGoldLabs(t)
	t.Setenv("COLUMNS", "100")
	for _, c := range liveGoldenCases() {
		t.Run(c.name, func(t *testing.T) { checkGolden(t, c) })
	}
}

// TestLiveTraceIsTheSnapshotTrace: the same packet on the same rules gives the same trace whether the node is read
// live (inspect/live: the collector, then the lab's names) or from its snapshot, and --service names the packet
// --dst names.
func TestLiveTraceIsTheSnapshotTrace(t *testing.T) {
	p := fakeGoldLabs(t)
	t.Setenv("COLUMNS", "100")
	for _, c := range []struct{ dp, dst string }{{"iptables", "172.18.0.4:31758"}, {"nftables", "172.18.0.4:30666"}, {"ebpf", "172.18.0.4:30464"}} {
		for _, format := range []string{"table", "json"} {
			status, want, errOut := run("trace", "--snapshot", "testdata/"+c.dp+"-worker2.v1.json", "--dst", c.dst, "-o", format)
			if status != 0 {
				t.Fatalf("trace --snapshot of %s: %s", c.dp, errOut)
			}
			for _, how := range [][]string{{"--dst", c.dst}, {"--service", "web"}} {
				args := append([]string{"trace", "--name", "gold-" + c.dp, "-o", format}, how...)
				status, got, errOut := run(args...)
				if status != 0 || got != want {
					t.Errorf("k8sguide %s: status %d, %s\nprinted something else than the snapshot's trace:\n%s\nwant:\n%s", strings.Join(args, " "), status, errOut, got, want)
				}
			}
		}
	}
	// Each trace read worker2, the node --dst and --service name, and nothing else.
	for _, l := range []string{"gold-iptables", "gold-nftables", "gold-ebpf"} {
		if n := p.Collected(l); len(n) != 1 || n[l+"-worker2"] != 4 {
			t.Errorf("lab %s: the collector ran %v; want 4 times on worker2 only", l, n)
		}
	}
}
