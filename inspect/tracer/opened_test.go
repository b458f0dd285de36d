package tracer_test

import (
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/inspect/snapshot"
	"github.com/k8sguide/k8sguide/inspect/tracer"
)

// TestOpenedTracesAsFresh: walks through one Opened snapshot (parsed once) give what a fresh Trace of the same
// snapshot gives, whatever was walked before them — no walk leaves state behind in the parsed rules. The
// snapshots are the CLI's golden fixtures, taken from netns labs (see cmd/k8sguide/app/testdata/README.md).
func TestOpenedTracesAsFresh(t *testing.T) {
	files, _ := filepath.Glob("../../cmd/k8sguide/app/testdata/*.v1.json")
	if len(files) == 0 {
		t.Fatal("no snapshot fixtures found")
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			s, err := tracer.Load(data, nil)
			if err != nil {
				t.Fatal(err)
			}
			var reqs []tracer.Request
			for _, svc := range s.Kubernetes.Services {
				for _, p := range svc.Ports {
					reqs = append(reqs, tracer.Request{Dst: net.JoinHostPort(svc.ClusterIP, strconv.Itoa(int(p.Port))), Src: "10.244.1.254"})
					for _, n := range s.Kubernetes.Nodes {
						if p.NodePort != 0 {
							reqs = append(reqs, tracer.Request{Dst: net.JoinHostPort(n.IP, strconv.Itoa(int(p.NodePort)))})
						}
					}
				}
			}
			shared := tracer.Open(s)
			for round := 0; round < 2; round++ {
				for _, req := range reqs {
					got, gerr := shared.Trace(req)
					want, werr := tracer.Trace(s, req) // parses the snapshot's rules afresh
					gj, _ := json.Marshal(got)
					wj, _ := json.Marshal(want)
					if string(gj) != string(wj) || (gerr == nil) != (werr == nil) {
						t.Errorf("round %d, %+v: through the shared snapshot %s (%v), fresh %s (%v)", round, req, gj, gerr, wj, werr)
					}
				}
			}
		})
	}
}

// TestOpenedWalksKeepTheirOwnNotes: what one walk could not check (a source port it was not given) is noted
// in that walk only: a later walk of the same parsed rules that gives the port has no such note. A
// kube-proxy-like fragment, written for the test.
func TestOpenedWalksKeepTheirOwnNotes(t *testing.T) {
	dump := `*nat
:PREROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
-A PREROUTING -j KUBE-SERVICES
-A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m tcp --dport 80 --sport 1000:2000 -j DNAT --to-destination 10.244.1.5:80
COMMIT
`
	s, err := tracer.Load([]byte(dump), nil)
	if err != nil {
		t.Fatal(err)
	}
	walks := tracer.Open(s)
	for i, src := range []string{"10.244.2.9", "10.244.2.9:1500", "10.244.2.9", "10.244.2.9:1500"} {
		tr, err := walks.Trace(tracer.Request{Dst: "10.96.0.10:80", Src: src})
		if err != nil {
			t.Fatal(err)
		}
		noted := slices.ContainsFunc(tr.Notes, func(n string) bool { return strings.Contains(n, "source port") })
		if want := !strings.Contains(src, ":"); noted != want {
			t.Errorf("walk %d from %s: notes %q; want a source-port note: %v", i+1, src, tr.Notes, want)
		}
	}
}

// TestPastedDumpIsParsedOnce: what an engine's Sniff parsed a pasted dump into goes to the Open of that part
// (a 5,000-Service dump is parsed once), once: a second trace of the same snapshot parses the part afresh, as a
// walk changes the parsed rules in place, and answers as the first did. The dump is a netns lab's iptables-save
// (dataplanes/iptables/testdata/README.md).
func TestPastedDumpIsParsedOnce(t *testing.T) {
	raw, err := os.ReadFile("../../dataplanes/iptables/testdata/iptables-worker.save")
	if err != nil {
		t.Fatal(err)
	}
	load := func() *snapshot.Snapshot {
		s, err := tracer.Load(raw, []netip.Addr{netip.MustParseAddr("172.18.0.3")})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if load().TakeSniffed(dataplanes.IPTables) == nil {
		t.Error("Load does not keep the rules Sniff parsed: Open parses the dump a second time")
	}
	s := load()
	req := tracer.Request{Dst: "172.18.0.3:31103", Src: "172.18.0.1"}
	first, err := tracer.Trace(s, req)
	if err != nil {
		t.Fatal(err)
	}
	if s.TakeSniffed(dataplanes.IPTables) != nil {
		t.Error("the first Open left what Sniff parsed for another")
	}
	again, err := tracer.Trace(s, req)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(first)
	b, _ := json.Marshal(again)
	if string(a) != string(b) {
		t.Errorf("a second trace of the pasted dump differs from the first:\n%s\n%s", a, b)
	}
}
