package stages

import "github.com/k8sguide/k8sguide/dataplanes/trace"

// CompareVersion names the JSON schema of Comparison (`k8sguide compare -o json`): fields are only added within
// a version.
const CompareVersion = "k8sguide.compare/v1"

// Comparison is one packet through several dataplanes, stage by stage: every column has the same stages, in the
// order of Keys, so row i of each column is the same stage.
type Comparison struct {
	Version string `json:"version"`
	// Question is what was asked, before it was resolved per source.
	Question Question `json:"question"`
	// Stages are the stages' keys and titles, in order: the rows.
	Stages  []Heading `json:"stages"`
	Columns []Column  `json:"columns"`
}

// Question is the packet as the user gave it.
type Question struct {
	Service   string `json:"service,omitempty"` // --service: per source, its NodePort (or ClusterIP)
	ClusterIP bool   `json:"clusterIP,omitempty"`
	Dst       string `json:"dst,omitempty"` // --dst: the same destination in every source
	From      string `json:"from"`
	Node      string `json:"node,omitempty"`
}

// Heading is a stage's key and title.
type Heading struct {
	Key   string `json:"key"`
	Title string `json:"title"`
}

// Column is one dataplane's trace of the packet.
type Column struct {
	// Source is where the trace comes from: "lab NAME" or "snapshot FILE".
	Source    string       `json:"source"`
	Dataplane string       `json:"dataplane"`
	Node      string       `json:"node,omitempty"`
	Packet    trace.Packet `json:"packet"`
	Service   string       `json:"service,omitempty"`
	Verdict   string       `json:"verdict"`
	// Endpoints are the trace's endpoints with their chances.
	Endpoints []trace.Endpoint `json:"endpoints"`
	Stages    []Stage          `json:"stages"`
	// Trace is the whole trace, for renderers (the HTML page shows its table); `trace -o json` prints it.
	Trace *trace.Trace `json:"-"`
}

// NewColumn reads a trace into a column.
func NewColumn(source string, t *trace.Trace) Column {
	return Column{Source: source, Dataplane: t.Dataplane, Node: t.Node, Packet: t.Packet, Service: t.Service,
		Verdict: t.Verdict, Endpoints: t.Endpoints, Stages: Of(t), Trace: t}
}

// Compare puts the columns side by side.
func Compare(q Question, cols []Column) *Comparison {
	c := &Comparison{Version: CompareVersion, Question: q, Columns: cols}
	for _, k := range Keys {
		c.Stages = append(c.Stages, Heading{Key: k, Title: Titles[k]})
	}
	return c
}
