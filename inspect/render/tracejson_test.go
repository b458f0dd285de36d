package render_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/render"
	"github.com/k8sguide/k8sguide/internal/linediff"
)

// WriteTraceJSON writes hop lists one hop at a time; the document must be WriteData's, byte for byte, for real
// traces (the picture tests' snapshots, captured from netns labs and pasted dumps) and for the shapes a hop list
// can take (nil, empty, one hop, and text JSON escapes).
func TestWriteTraceJSONIsWriteData(t *testing.T) {
	traces := map[string]*trace.Trace{}
	for _, c := range pictureTraces {
		traces[c.name] = traceOf(t, c.snapshot, c.local, c.req)
	}
	hop := trace.Hop{Hook: "PREROUTING", Table: "nat", Chain: "KUBE-SERVICES", Rule: 1, Text: `-A KUBE-SERVICES -m comment --comment "a <b> & \"c\"" -j X`, Reason: "destination differs"}
	traces["nil-hops"] = &trace.Trace{Version: "k8sguide.trace/v1", Paths: []trace.Path{{Probability: 1}}}
	traces["empty-hops"] = &trace.Trace{Hops: []trace.Hop{}, Paths: []trace.Path{{Hops: []trace.Hop{}}, {Hops: []trace.Hop{hop}}}}
	traces["no-paths"] = &trace.Trace{Hops: []trace.Hop{hop, hop}}
	many := &trace.Trace{Dataplane: "iptables"}
	for range 5000 {
		many.Hops = append(many.Hops, hop)
	}
	many.Paths = []trace.Path{{Probability: 0.5, Hops: many.Hops}, {Probability: 0.5, Hops: many.Hops[:3]}}
	traces["many"] = many
	for name, tr := range traces {
		var want, got bytes.Buffer
		if err := render.WriteData(&want, render.JSON, tr); err != nil {
			t.Fatal(err)
		}
		if err := render.WriteTraceJSON(&got, tr); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Errorf("%s: WriteTraceJSON differs from WriteData:\n%s", name, linediff.First(want.String(), got.String()))
		}
		if name == "many" && strings.Count(got.String(), `"chain": "KUBE-SERVICES"`) != 10003 {
			t.Errorf("many: %d hops written, want 10,003", strings.Count(got.String(), `"chain": "KUBE-SERVICES"`))
		}
	}
}
