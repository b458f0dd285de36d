package netns_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/stages"
	"github.com/k8sguide/k8sguide/internal/e2etest"
)

// TestCompare runs compare on running iptables, nftables and ebpf labs, for web's NodePort from the client and for
// its ClusterIP from a pod: every column has the stages in the same order, and each column's endpoints and the
// source each pod sees are what trace says on that lab.
func TestCompare(t *testing.T) {
	ds := []dataplanes.Name{dataplanes.IPTables, dataplanes.NFTables, dataplanes.EBPF}
	for _, d := range ds {
		needRoot(t, toolFor(d))
	}
	e2etest.NeedEBPF(t)
	// The package's shared labs, which compare and trace only read.
	var names []string
	for _, d := range ds {
		names = append(names, e2etest.SharedLab(t, d))
	}
	args := []string{"compare"}
	for _, n := range names {
		args = append(args, "--name", n)
	}
	// The table fits 100 columns (e2etest checks every line of it).
	mustK8sguide(t, append(args, "--service", "web")...)
	for _, q := range [][]string{
		{"--service", "web"},
		{"--service", "web", "--cluster-ip", "--from", "pod/web"},
	} {
		var c stages.Comparison
		if err := json.Unmarshal([]byte(mustK8sguide(t, append(append(append([]string{}, args...), q...), "-o", "json")...)), &c); err != nil {
			t.Fatal(err)
		}
		if len(c.Columns) != len(names) {
			t.Fatalf("compare %v: %d columns, want %d", q, len(c.Columns), len(names))
		}
		for i, col := range c.Columns {
			var keys []string
			for _, s := range col.Stages {
				keys = append(keys, s.Key)
			}
			if !slices.Equal(keys, stages.Keys) || col.Dataplane != string(ds[i]) {
				t.Errorf("%s column %d: dataplane %s, stages %v; want %s, %v", q, i, col.Dataplane, keys, ds[i], stages.Keys)
			}
			if col.Verdict != trace.Delivered {
				t.Errorf("%s %v: verdict %s", col.Source, q, col.Verdict)
			}
			// The same packet through trace on that lab.
			targs := []string{"trace", "--name", names[i], "--node", col.Node, "--dst", col.Packet.Dst, "-o", "json"}
			if col.Packet.From != "client" {
				targs = append(targs, "--from", col.Packet.From)
			}
			var tr trace.Trace
			if err := json.Unmarshal([]byte(mustK8sguide(t, targs...)), &tr); err != nil {
				t.Fatal(err)
			}
			// trace names the same packet by the Service as compare does (--service, --cluster-ip).
			sargs := []string{"trace", "--name", names[i], "-o", "json", "--service", "web"}
			if slices.Contains(q, "--cluster-ip") {
				sargs = append(sargs, "--cluster-ip", "--from", col.Packet.From) // the pod compare picked
			} else {
				sargs = append(sargs, "--node", col.Node)
			}
			var byService trace.Trace
			if err := json.Unmarshal([]byte(mustK8sguide(t, sargs...)), &byService); err != nil {
				t.Fatal(err)
			}
			if byService.Packet.Dst != col.Packet.Dst || byService.Node != col.Node {
				t.Errorf("%v: trace by the Service goes to %s on %s, compare to %s on %s", sargs, byService.Packet.Dst, byService.Node, col.Packet.Dst, col.Node)
			}
			var got, want []string
			for _, e := range col.Endpoints {
				got = append(got, e.Addr())
			}
			for _, e := range tr.Endpoints {
				want = append(want, e.Addr())
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) || len(want) != 3 {
				t.Errorf("%s %v: endpoints %v, trace says %v", col.Source, q, got, want)
			}
			// Each path's source, as the pod sees it, is in the Source stage, with its endpoint when paths differ.
			src := stages.Find(col.Stages, stages.Source)
			for _, p := range tr.Paths {
				ok := slices.ContainsFunc(src.All(), func(line string) bool {
					return strings.Contains(line, p.SNAT) && (len(src.Paths) == 0 || strings.Contains(line, p.Endpoint.Addr()))
				})
				if !ok {
					t.Errorf("%s %v: trace's path to %s has the pod see %s; compare's source stage says %q", col.Source, q, p.Endpoint.Addr(), p.SNAT, src.All())
				}
			}
			// The SNAT stage: masquerade on some path exactly when trace masquerades on some path.
			masq := slices.ContainsFunc(tr.Paths, func(p trace.Path) bool {
				return slices.ContainsFunc(p.Hops, func(h trace.Hop) bool { return h.Matched && strings.HasPrefix(h.Verdict, "masquerade") })
			})
			if snat := strings.Join(stages.Find(col.Stages, stages.SNAT).All(), " "); strings.Contains(snat, "masquerade to") != masq {
				t.Errorf("%s %v: SNAT stage %q, but trace masquerades: %v", col.Source, q, snat, masq)
			}
		}
	}
	// Bad input: one line, non-zero.
	for _, bad := range [][]string{
		{"compare", "--name", "cmp-nosuch", "--name", names[0], "--service", "web"},
		{"compare", "--name", names[0], "--snapshot", "x.json", "--service", "web"},
		{"compare", "--name", names[0], "--name", names[1], "--dst", "10.96.0.1"},
	} {
		if out, err := e2etest.Quiet(bad...); err == nil || strings.Count(strings.TrimSpace(err.Error()), "\n") > 0 {
			t.Errorf("k8sguide %v: want one error line and a non-zero exit, got %v (%s)", bad, err, out)
		}
	}
}

// TestCompareShortLived: compare --dataplanes builds its labs, traces, and removes them, leaving nothing behind,
// on success and on Ctrl-C; an unknown dataplane builds nothing.
func TestCompareShortLived(t *testing.T) {
	needRoot(t, "iptables-restore", "nft")
	built := regexp.MustCompile(`short-lived lab "([^"]+)"`)
	cmd := exec.Command(e2etest.Binary, "compare", "--dataplanes", "iptables,nftables", "--service", "web")
	cmd.Env = append(os.Environ(), "COLUMNS=100")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("compare --dataplanes: %v\n%s", err, stderr.String())
	}
	t.Logf("$ k8sguide compare --dataplanes iptables,nftables --service web\n%s%s", stdout.String(), stderr.String())
	for _, want := range []string{"IPTABLES", "NFTABLES", "KUBE-NODEPORTS", "service-nodeports"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("compare --dataplanes iptables,nftables does not show %q", want)
		}
	}
	labs := built.FindAllStringSubmatch(stderr.String(), -1)
	if len(labs) != 2 {
		t.Errorf("compare --dataplanes iptables,nftables said it built %d labs:\n%s", len(labs), stderr.String())
	}
	for _, m := range labs {
		assertNothingLeft(t, m[1])
	}

	// Ctrl-C while the first lab is being built: it goes.
	cmd = exec.Command(e2etest.Binary, "compare", "--dataplanes", "iptables,nftables", "--service", "web")
	progress := &syncBuffer{}
	cmd.Stderr = progress
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for !built.MatchString(progress.String()) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(3 * time.Second)
	cmd.Process.Signal(os.Interrupt)
	if err := cmd.Wait(); err == nil {
		t.Errorf("compare interrupted exited 0")
	}
	t.Logf("interrupted:\n%s", progress.String())
	for _, m := range built.FindAllStringSubmatch(progress.String(), -1) {
		assertNothingLeft(t, m[1])
	}

	if _, err := e2etest.Quiet("compare", "--dataplanes", "iptables,bogus", "--service", "web"); err == nil {
		t.Errorf("compare --dataplanes iptables,bogus succeeded")
	}
	netns, _ := exec.Command("ip", "netns", "list").Output()
	if strings.Contains(string(netns), "cmp") {
		t.Errorf("compare --dataplanes left namespaces:\n%s", netns)
	}
	entries, _ := os.ReadDir(e2etest.StateDir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "cmp") {
			t.Errorf("compare --dataplanes left lab state %s", filepath.Join(e2etest.StateDir, e.Name()))
		}
	}
}

// syncBuffer is a bytes.Buffer a command writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
