package render

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// stoppedTrace is a trace the walk stopped at 4,096 paths of 2³⁰, all delivering to one endpoint: before its
// unexplored chance was carried, that endpoint read 0.00% in every view (issue 36).
func stoppedTrace() *trace.Trace {
	t := &trace.Trace{Dataplane: "iptables", Packet: trace.Packet{Src: "172.18.0.1", Dst: "172.18.0.3:30080", Proto: "tcp", From: "client"}}
	for range 4096 {
		t.Paths = append(t.Paths, trace.Path{Probability: 1.0 / (1 << 30), Verdict: trace.Delivered, SNAT: "172.18.0.3",
			Endpoint: &trace.Endpoint{IP: "10.244.1.2", Port: 80},
			Hops:     []trace.Hop{{Hook: "PREROUTING", Table: "nat", Chain: "PREROUTING", Rule: 1, Text: "-j DNAT --to-destination 10.244.1.2:80", Matched: true, Verdict: "dnat to 10.244.1.2:80"}}})
	}
	t.Unexplored = 1 - 4096.0/(1<<30)
	t.Notes = []string{"stopped after 4096 paths; more random outcomes exist (99.99962% of new flows not explored)"}
	t.Finish()
	return t
}

// TestStoppedWalkIsLabelled: no view shows 0.00% for the endpoint; each says its chance is a lower bound (≥) and
// that the rest was not explored, and the JSON carries the unexplored chance.
func TestStoppedWalkIsLabelled(t *testing.T) {
	tr := stoppedTrace()
	if tr.Verdict != trace.Unknown {
		t.Errorf("verdict %s: the unexplored outcomes are not known", tr.Verdict)
	}
	for _, o := range []TraceOptions{{}, {Summary: true}, {Wide: true}} {
		var b bytes.Buffer
		if err := Trace(&b, tr, o); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		if strings.Contains(out, " 0.00%") || !strings.Contains(out, "≥0.00038%") || !strings.Contains(out, "99.99962% not explored") {
			t.Errorf("%+v:\n%s", o, out)
		}
	}
	var b bytes.Buffer
	if err := WriteData(&b, JSON, tr); err != nil {
		t.Fatal(err)
	}
	var back trace.Trace
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || back.Unexplored != tr.Unexplored {
		t.Errorf("JSON unexplored %v (%v), want %v", back.Unexplored, err, tr.Unexplored)
	}
}
