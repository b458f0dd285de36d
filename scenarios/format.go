package scenarios

import (
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// APIVersion and Kind name the scenario file format, as a Kubernetes object's would.
const (
	APIVersion = "k8sguide.io/v1alpha1"
	Kind       = "Scenario"
)

// Scenario is one lesson: the lab it needs, and steps that change the lab or check what it does. The JSON Schema
// of the file (scenario.schema.json) is what Load validates against first; these types are what it decodes into.
type Scenario struct {
	APIVersion string   `yaml:"apiVersion" json:"apiVersion"`
	Kind       string   `yaml:"kind" json:"kind"`
	Metadata   Metadata `yaml:"metadata" json:"metadata"`
	Lab        Lab      `yaml:"lab" json:"lab"`
	Steps      []Step   `yaml:"steps" json:"steps"`

	// File is where the scenario was read from ("builtin/NAME.yaml" for a shipped one).
	File string `yaml:"-" json:"file"`
	// files reads the files a step names, beside the scenario.
	files func(name string) ([]byte, error)
}

// Metadata names and describes a scenario.
type Metadata struct {
	Name  string `yaml:"name" json:"name"`
	Title string `yaml:"title,omitempty" json:"title,omitempty"`
	// Lesson is where the lesson comes from (a chapter of the guide, a Kubernetes page).
	Lesson      string `yaml:"lesson,omitempty" json:"lesson,omitempty"`
	Description string `yaml:"description,omitempty" json:"description,omitempty"`
}

// Lab is the lab a scenario needs; every dataplane of Dataplanes gets a fresh one.
type Lab struct {
	// Dataplanes the scenario is for (default: all four).
	Dataplanes        []string `yaml:"dataplanes,omitempty" json:"dataplanes,omitempty"`
	Workers           *int     `yaml:"workers,omitempty" json:"workers,omitempty"`
	NodePortRange     string   `yaml:"nodePortRange,omitempty" json:"nodePortRange,omitempty"`
	NodePortAddresses []string `yaml:"nodePortAddresses,omitempty" json:"nodePortAddresses,omitempty"`
	LBAlgorithm       string   `yaml:"lbAlgorithm,omitempty" json:"lbAlgorithm,omitempty"`
}

// Step is one thing to do: exactly one of the actions (Deploy … Wait) or checks (Connect, Trace, Object).
type Step struct {
	Name string `yaml:"name,omitempty" json:"name,omitempty"`
	// Explain is the lesson's sentence: what to notice in this step's output.
	Explain string `yaml:"explain,omitempty" json:"explain,omitempty"`

	Deploy *Deploy `yaml:"deploy,omitempty" json:"deploy,omitempty"`
	Scale  *Scale  `yaml:"scale,omitempty" json:"scale,omitempty"`
	Expose *Expose `yaml:"expose,omitempty" json:"expose,omitempty"`
	Delete *Delete `yaml:"delete,omitempty" json:"delete,omitempty"`
	Wait   *Wait   `yaml:"wait,omitempty" json:"wait,omitempty"`

	Connect *Connect     `yaml:"connect,omitempty" json:"connect,omitempty"`
	Trace   *TraceCheck  `yaml:"trace,omitempty" json:"trace,omitempty"`
	Object  *ObjectCheck `yaml:"object,omitempty" json:"object,omitempty"`

	// Line is the step's line in its file.
	Line int `yaml:"-" json:"line"`
}

// Deploy applies a manifest (ConfigMaps, Deployments, Services), as `k8sguide deploy` does: the guide's web
// Deployment when neither File nor Manifest is given.
type Deploy struct {
	File     string `yaml:"file,omitempty" json:"file,omitempty"`
	Manifest string `yaml:"manifest,omitempty" json:"manifest,omitempty"`
	Replicas *int32 `yaml:"replicas,omitempty" json:"replicas,omitempty"`
}

// Scale scales a Deployment.
type Scale struct {
	Deployment string `yaml:"deployment" json:"deployment"`
	Namespace  string `yaml:"namespace,omitempty" json:"namespace,omitempty"`
	Replicas   int32  `yaml:"replicas" json:"replicas"`
}

// Expose exposes a Deployment as a NodePort Service, as `k8sguide nodeport` does. With ExpectError the step is a
// check: the apiserver must refuse the Service with a message containing it.
type Expose struct {
	Deployment            string `yaml:"deployment,omitempty" json:"deployment,omitempty"`
	Namespace             string `yaml:"namespace,omitempty" json:"namespace,omitempty"`
	Service               string `yaml:"service,omitempty" json:"service,omitempty"`
	Port                  int32  `yaml:"port,omitempty" json:"port,omitempty"`
	TargetPort            int32  `yaml:"targetPort,omitempty" json:"targetPort,omitempty"`
	NodePort              int32  `yaml:"nodePort,omitempty" json:"nodePort,omitempty"`
	ExternalTrafficPolicy string `yaml:"externalTrafficPolicy,omitempty" json:"externalTrafficPolicy,omitempty"`
	ExpectError           string `yaml:"expectError,omitempty" json:"expectError,omitempty"`
}

// Delete deletes one object.
type Delete struct {
	Kind      string `yaml:"kind" json:"kind"`
	Name      string `yaml:"name" json:"name"`
	Namespace string `yaml:"namespace,omitempty" json:"namespace,omitempty"`
}

// Wait pauses: the lab's own commands already wait for the nodes to follow a change, so this is for lessons
// about time (an affinity timeout, a conntrack entry expiring).
type Wait struct {
	Seconds int `yaml:"seconds" json:"seconds"`
}

// Connect makes Count real connections from From to To and checks who answered and the source each pod saw.
type Connect struct {
	// From is where the connections start: client, node/NODE or pod/DEPLOYMENT@NODE (a pod of the Deployment on
	// that node).
	From string `yaml:"from,omitempty" json:"from,omitempty"`
	// To is IP:PORT, usually by reference: "${node.worker2}:${service.web.nodePort}".
	To         string                            `yaml:"to" json:"to"`
	Count      int                               `yaml:"count,omitempty" json:"count,omitempty"`
	Expect     ConnectExpect                     `yaml:"expect" json:"expect"`
	Dataplanes map[string]Differs[ConnectExpect] `yaml:"dataplanes,omitempty" json:"dataplanes,omitempty"`
}

// ConnectExpect is what the connections must show; a field left out is not checked.
type ConnectExpect struct {
	// Answered is how many connections must be answered: a number, all or none.
	Answered *Count `yaml:"answered,omitempty" json:"answered,omitempty"`
	// Pods are the pods that must answer, each at least once, and no other.
	Pods *PodSet `yaml:"pods,omitempty" json:"pods,omitempty"`
	// Source is the source address every answering pod saw: client (the sender's own address), node (an address
	// of the node the connection was sent to: its SNAT), hairpin (the sending pod's own address, except where
	// the sender answered itself: an address of its node; hairpin:ADDR where it answered itself from ADDR),
	// remote (the sender's own address at the pods of the
	// node it was sent to, the node's address at pods elsewhere: SNAT only to reach another node, as Cilium's
	// NodePort), or an address (by reference).
	Source string `yaml:"source,omitempty" json:"source,omitempty"`
}

// Differs is a dataplane's own expectation E of a check, where dataplanes legitimately differ (Expect, with the
// Reason the report prints), or a failure known today (Known: why it fails; the check still runs, and passing
// it is then reported, so the file gets updated). A key is a dataplane, or PROVIDER/DATAPLANE for one provider's
// labs only (see ForDataplane).
type Differs[E any] struct {
	Expect *E     `yaml:"expect,omitempty" json:"expect,omitempty"`
	Reason string `yaml:"reason,omitempty" json:"reason,omitempty"`
	Known  string `yaml:"known,omitempty" json:"known,omitempty"`
}

// ForDataplane is the expectation a check holds dataplane dp to: its own, with the reason, where the scenario
// gives one, else base; and why it fails there today, where the scenario says it does. On a provider's labs
// (provider "kind" or "netns"; "" when not known) an entry for PROVIDER/DP (kind/ebpf: real Cilium on kind
// behaves unlike the netns lab's) comes before the dataplane's own.
func ForDataplane[E any](base E, dataplanes map[string]Differs[E], provider, dp string) (want E, reason, known string) {
	d, ok := dataplanes[provider+"/"+dp]
	if !ok || provider == "" {
		d, ok = dataplanes[dp]
	}
	if !ok {
		return base, "", ""
	}
	// (A folded YAML block, reason: >, ends in a newline the reports do not want.)
	if d.Expect != nil {
		return *d.Expect, strings.TrimSpace(d.Reason), strings.TrimSpace(d.Known)
	}
	return base, "", strings.TrimSpace(d.Known)
}

// TraceCheck traces a packet (as `k8sguide trace`) and checks the prediction, and with Verify the kernel's
// agreement.
type TraceCheck struct {
	From string `yaml:"from,omitempty" json:"from,omitempty"`
	// Node is the node whose rules the packet meets (default: the node that owns Dst).
	Node string `yaml:"node,omitempty" json:"node,omitempty"`
	Dst  string `yaml:"dst" json:"dst"`
	// Src is the packet's source address, when it is not the sending place's own (another client): not with
	// Verify, whose real packet leaves with the place's own address.
	Src    string `yaml:"src,omitempty" json:"src,omitempty"`
	Proto  string `yaml:"proto,omitempty" json:"proto,omitempty"`
	Verify bool   `yaml:"verify,omitempty" json:"verify,omitempty"`

	Expect     TraceExpect                     `yaml:"expect" json:"expect"`
	Dataplanes map[string]Differs[TraceExpect] `yaml:"dataplanes,omitempty" json:"dataplanes,omitempty"`
}

// TraceExpect is what the trace must say; a field left out is not checked.
type TraceExpect struct {
	// Verdict: delivered, dropped, rejected or local.
	Verdict string `yaml:"verdict,omitempty" json:"verdict,omitempty"`
	// Endpoints are the pods the packet can reach.
	Endpoints *PodSet `yaml:"endpoints,omitempty" json:"endpoints,omitempty"`
	// Chances: equal (every endpoint 1/n), rr (a round-robin turn for each), or the chances, largest first.
	Chances *Chances `yaml:"chances,omitempty" json:"chances,omitempty"`
	// SNAT is the source every endpoint sees: node (an address of the tracing node), none (the packet's own),
	// hairpin (the packet's own, except on the path back to the sending pod: an address of the node;
	// hairpin:ADDR: ADDR on that path), or remote
	// (the packet's own at the tracing node's pods, an address of the node at pods elsewhere).
	SNAT string `yaml:"snat,omitempty" json:"snat,omitempty"`
	// Notes must each appear in one of the trace's notes.
	Notes []string `yaml:"notes,omitempty" json:"notes,omitempty"`
	// Verify: agree (with verify: true, the kernel took a predicted path).
	Verify string `yaml:"verify,omitempty" json:"verify,omitempty"`
}

// ObjectCheck reads one field of a Kubernetes object.
type ObjectCheck struct {
	// Get is KIND/NAME (service/web, deployment/web, …).
	Get       string `yaml:"get" json:"get"`
	Namespace string `yaml:"namespace,omitempty" json:"namespace,omitempty"`
	// Path is a kubectl JSONPath template, e.g. {.spec.ports[0].nodePort}.
	Path   string       `yaml:"path" json:"path"`
	Expect ObjectExpect `yaml:"expect" json:"expect"`
}

// ObjectExpect is what the field must be: one of Equals, Between (inclusive) or Matches (a regular expression).
type ObjectExpect struct {
	Equals  *string `yaml:"equals,omitempty" json:"equals,omitempty"`
	Between []int64 `yaml:"between,omitempty" json:"between,omitempty"`
	Matches string  `yaml:"matches,omitempty" json:"matches,omitempty"`
}

// Count is a number of connections, or all / none of them.
type Count struct {
	All  bool
	N    int
	Word string // "all", "none" or ""
}

func (c *Count) UnmarshalYAML(n *yaml.Node) error {
	switch n.Value {
	case "all":
		*c = Count{All: true, Word: "all"}
		return nil
	case "none":
		*c = Count{Word: "none"}
		return nil
	}
	v, err := strconv.Atoi(n.Value)
	if err != nil || v < 0 {
		return fmt.Errorf("line %d: answered: want a number, all or none, not %q", n.Line, n.Value)
	}
	*c = Count{N: v}
	return nil
}

func (c Count) String() string {
	if c.Word != "" {
		return c.Word
	}
	return strconv.Itoa(c.N)
}

// PodSet names a set of pods: all (every ready endpoint of the Service), none, local (the endpoints on the
// node the packet is sent to), one (connections only: one endpoint, the same every time), or the endpoints on
// the given nodes.
type PodSet struct {
	Word  string   // all | none | local
	Nodes []string // {nodes: [worker, …]}
}

func (p *PodSet) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		p.Word = n.Value
		return nil
	}
	var v struct {
		Nodes []string `yaml:"nodes"`
	}
	if err := n.Decode(&v); err != nil {
		return err
	}
	p.Nodes = v.Nodes
	return nil
}

func (p PodSet) String() string {
	if p.Word != "" {
		return p.Word
	}
	return fmt.Sprintf("the endpoints on %v", p.Nodes)
}

// Chances are the endpoints' chances: equal, rr, or a list.
type Chances struct {
	Word string
	List []float64
}

func (c *Chances) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		c.Word = n.Value
		return nil
	}
	return n.Decode(&c.List)
}

func (c Chances) String() string {
	if c.Word != "" {
		return c.Word
	}
	return fmt.Sprint(c.List)
}
