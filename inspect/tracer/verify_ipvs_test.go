package tracer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/ipvs"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/kerneltrace"
	"github.com/k8sguide/k8sguide/inspect/snapshot"
)

// The IPVS part of --verify on the snapshots TestGuestNodePort captured in the IPVS test VM
// (dataplanes/ipvs/testdata: the node before six connections from 172.18.0.1 ports 40001-40006, and after). The
// kernel sent them to .4, .3, .2, .4, .3, .2; the prediction from the first snapshot says .4 is next.
func TestCompareIPVS(t *testing.T) {
	before, after := vmSnapshot(t, "vm-snapshot.json"), vmSnapshot(t, "vm-snapshot-after.json")
	cases := []struct {
		name     string
		sport    uint16
		pod      string // the pod that answered
		current  bool   // the counters were read settled
		reason   string // "" for agree
		kernelTo string
	}{
		{"first connection, to the server the trace said is next", 40001, "web-c", true, "", "10.244.0.4:8080"},
		{"second connection, measured against the first one's prediction", 40002, "web-b", true,
			"the trace said round robin's next real server is 10.244.0.4:8080; IPVS chose 10.244.0.3:8080", "10.244.0.3:8080"},
		{"the same, counters not known to be current: the turn is not checked", 40002, "web-b", false, "", "10.244.0.3:8080"},
		{"the entry and the answering pod differ", 40003, "web-c", true, "IPVS's entry names 10.244.0.2:8080 but web-c answered", "10.244.0.2:8080"},
		{"no entry for the flow", 40999, "web-c", true, "IPVS made no connection entry for 172.18.0.1:40999 -> 172.18.0.2:30080", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pred, err := Trace(before, Request{Dst: "172.18.0.2:30080", Sport: c.sport})
			if err != nil {
				t.Fatal(err)
			}
			flow, _ := pred.Packet.ParseFlow()
			// The rule trace the kernel would report for every path (they share their rules), so that only
			// IPVS's part can disagree.
			var events []trace.KernelEvent
			for _, h := range kernelVisible(pred.Paths[0], false, ipvs.Engine{}.Records) {
				e := trace.KernelEvent{Table: h.Table, Chain: h.Chain, Kind: "rule", Text: h.Text}
				if h.Rule == 0 {
					e.Kind, e.Verdict = "policy", strings.TrimPrefix(h.Verdict, "policy ")
				}
				events = append(events, e)
			}
			v := Compare(pred, events, trace.Connection{Answered: true, Pod: c.pod, Client: "10.244.0.1:51234"})
			if v.Result != "agree" {
				t.Fatalf("the rules alone: %s %v", v.Result, v.Reasons)
			}
			ipvs.Engine{}.Check(v, after.Part(dataplanes.IPVS), flow, c.current)
			want := "agree"
			if c.reason != "" {
				want = "disagree"
			}
			if v.Result != want || c.reason != "" && !contains(v.Reasons, c.reason) {
				t.Fatalf("result %s, reasons %q; want %s with %q", v.Result, v.Reasons, want, c.reason)
			}
			if c.kernelTo != "" && (len(RuleEvents(v.Kernel)) != len(v.Kernel)-1 || v.Kernel[len(v.Kernel)-1].Verdict != "real server "+c.kernelTo) {
				t.Fatalf("kernel events %+v: want the IPVS entry to %s last", v.Kernel, c.kernelTo)
			}
		})
	}
	// A connection nobody answered (a reply that went astray) says nothing of the pod: the entry picks the path.
	pred, err := Trace(before, Request{Dst: "172.18.0.2:30080", Sport: 40003})
	if err != nil {
		t.Fatal(err)
	}
	flow, _ := pred.Packet.ParseFlow()
	v := Compare(pred, nil, trace.Connection{Error: "i/o timeout"})
	ipvs.Engine{}.Check(v, after.Part(dataplanes.IPVS), flow, false)
	if v.Path < 0 || pred.Paths[v.Path].Endpoint.Addr() != "10.244.0.2:8080" {
		t.Errorf("unanswered connection: path %d, want the one to 10.244.0.2:8080, IPVS's entry", v.Path)
	}
}

// The rules around IPVS against the kernel's own trace of a connection in the IPVS test VM (TestGuestNodePort:
// xtables-monitor --trace on Debian's 6.1 kernel, which reports chain exits as "return" events, and the
// node's snapshot just before; the connection from 172.18.0.1:40200 went to 10.244.0.3, pod web-b).
func TestCompareIPVSRulesWithVMTrace(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "dataplanes", "ipvs", "testdata", "vm-xtables-monitor-trace.txt"))
	if err != nil {
		t.Fatal(err)
	}
	pred, err := Trace(vmSnapshot(t, "vm-snapshot-traced.json"), Request{Dst: "172.18.0.2:30080", Src: "172.18.0.1:40200"})
	if err != nil {
		t.Fatal(err)
	}
	flow, _ := pred.Packet.ParseFlow()
	flow.Proto = "tcp"
	events := kerneltrace.ParseXtables(strings.Split(string(data), "\n"), trace.Flow{Src: flow.Src, Dst: flow.Dst, Sport: flow.Sport, Dport: flow.Dport, Proto: "tcp"})
	if _, returns := withoutReturns(events); !returns {
		t.Fatalf("a 6.1 kernel's trace without return events: %+v", events)
	}
	v := Compare(pred, events, trace.Connection{Answered: true, Pod: "web-b", Client: "10.244.0.1:40200"})
	if v.Result != "agree" || pred.Paths[v.Path].Endpoint.IP != "10.244.0.3" {
		t.Fatalf("%s %v\n%+v", v.Result, v.Reasons, v.Rows)
	}
	// The rules the kernel reported for the SYN, in order: PREROUTING's jumps to the NodePort mark, INPUT's
	// filters, then (IPVS having sent the packet on itself) OUTPUT's filter and POSTROUTING's masquerade.
	var got []string
	for _, r := range v.Rows {
		got = append(got, r.Kernel)
	}
	want := []string{"nat/PREROUTING JUMP:KUBE-SERVICES", "nat/KUBE-SERVICES JUMP:KUBE-NODE-PORT", "nat/KUBE-NODE-PORT JUMP:KUBE-MARK-MASQ",
		"nat/KUBE-MARK-MASQ CONTINUE", "nat/PREROUTING policy accept", "filter/INPUT JUMP:KUBE-IPVS-FILTER",
		"filter/INPUT JUMP:KUBE-PROXY-FIREWALL", "filter/INPUT JUMP:KUBE-NODE-PORT", "filter/INPUT policy accept",
		"filter/OUTPUT JUMP:KUBE-IPVS-OUT-FILTER", "filter/OUTPUT policy accept", "nat/POSTROUTING JUMP:KUBE-POSTROUTING",
		"nat/KUBE-POSTROUTING CONTINUE", "nat/KUBE-POSTROUTING ACCEPT"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("kernel rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func vmSnapshot(t *testing.T, name string) *snapshot.Snapshot {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "dataplanes", "ipvs", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	s, err := snapshot.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
