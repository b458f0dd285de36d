// Package lab defines what a k8sguide lab is, independently of the machinery that builds it: a small Kubernetes
// cluster (one control-plane node and N workers) whose Service dataplane is one real proxy engine, plus a client
// that plays the host outside the cluster. Providers (netns, kind) implement Provider.
package lab

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/engines"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// DefaultName is the lab name used when --name is not given; it is the name of the seeds' kind cluster.
const DefaultName = "k8s-guide"

// Network layout shared by both providers; these are kind's defaults, so addresses read like the seeds'.
const (
	PodSubnet     = "10.244.0.0/16"
	ServiceSubnet = "10.96.0.0/16"
	// DefaultNodePortRange is the apiserver's default --service-node-port-range.
	DefaultNodePortRange = "30000-32767"
)

// Config is what `k8sguide up` asks a provider to build.
type Config struct {
	Name              string
	Dataplane         dataplanes.Name
	Workers           int
	NodePortRange     string   // "30000-32767"
	NodePortAddresses []string // CIDRs handed to kube-proxy's --nodeport-addresses; empty means all local addresses
	// LBAlgorithm is Cilium's --bpf-lb-algorithm for the ebpf dataplane: "random" (the default) or "maglev".
	LBAlgorithm string

	// Only the kind provider builds real Kubernetes nodes; these are its settings.
	Image             string // node image (default: the pinned Kubernetes 1.36 one)
	KubernetesVersion string // picks a node image by version instead
	Kubeconfig        string // where kind writes the kubeconfig ("" as kind does: $KUBECONFIG, else ~/.kube/config)
	Retain            bool   // keep a cluster whose creation failed, for debugging
}

var namePattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$`)

// ValidateName checks a lab name: it prefixes namespace and node names, so it must be a short DNS label.
func ValidateName(name string) error {
	if !namePattern.MatchString(name) {
		return fmt.Errorf("invalid lab name %q: use 1-32 lowercase letters, digits and '-', starting and ending with a letter or digit", name)
	}
	return nil
}

// Role is a node's role, as kind names it.
type Role string

const (
	ControlPlane Role = "control-plane"
	Worker       Role = "worker"
)

// Node is one node of a lab.
type Node struct {
	Name    string `json:"name"`
	Role    Role   `json:"role"`
	IP      string `json:"ip"`
	PodCIDR string `json:"podCIDR"`
}

// NodeNames returns the kind-style node names of a lab: NAME-control-plane, NAME-worker, NAME-worker2, ...
func NodeNames(name string, workers int) []string {
	names := []string{name + "-control-plane"}
	for i := 1; i <= workers; i++ {
		if i == 1 {
			names = append(names, name+"-worker")
		} else {
			names = append(names, fmt.Sprintf("%s-worker%d", name, i))
		}
	}
	return names
}

// ClientName is the name of the lab's client: the machine outside the cluster ("the host" in the seeds).
func ClientName(name string) string { return name + "-client" }

// ResolveNode finds arg among nodes, the full names of lab labName's nodes (LAB-worker2; the client's too, where
// a command takes it). arg is a full name or a short one, without the lab's prefix, as node-ip prints it
// (worker2, control-plane). An unknown name is a *NotFoundError that lists the nodes and suggests the closest
// by edit distance, written the way arg was (short or full), when it is close enough to be a typo.
func ResolveNode(nodes []string, labName, arg string) (string, error) {
	if slices.Contains(nodes, arg) {
		return arg, nil
	}
	prefix := labName + "-"
	if labName != "" && slices.Contains(nodes, prefix+arg) {
		return prefix + arg, nil
	}
	nf := &NotFoundError{Kind: "node", Name: arg, Known: nodes}
	best := -1
	for _, n := range nodes {
		form := n
		if !strings.HasPrefix(arg, prefix) {
			form = strings.TrimPrefix(n, prefix)
		}
		// A guess more than half wrong is no help: the list follows anyway.
		if d := editDistance(arg, form); 2*d <= len(form) && (best < 0 || d < best) {
			best, nf.Suggest = d, form
		}
	}
	return "", nf
}

// editDistance is the Levenshtein distance between a and b, in bytes (node names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// PodRef reads a pod named as trace --from names one: "pod/NAME", or "pod/NAMESPACE/NAME" (namespace "" is any
// namespace). ok is false for anything else, which names a node or the client.
func PodRef(target string) (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(target, "pod/")
	if !ok {
		return "", "", false
	}
	parts := strings.Split(rest, "/")
	for _, p := range parts {
		if p == "" {
			return "", "", false
		}
	}
	switch len(parts) {
	case 1:
		return "", parts[0], true
	case 2:
		return parts[0], parts[1], true
	}
	return "", "", false
}

// Status summarises a lab.
type Status struct {
	Name      string          `json:"name"`
	Provider  string          `json:"provider"`
	Dataplane dataplanes.Name `json:"dataplane"`
	Nodes     []Node          `json:"nodes"`
	// NodePortAddresses is kube-proxy's --nodeport-addresses where the provider knows it (nil: unset).
	NodePortAddresses []string `json:"nodePortAddresses,omitempty"`
	// Client is the lab's outside host: the address NodePort traffic comes from (the Docker bridge gateway
	// on kind, the client namespace on netns).
	Client string `json:"client,omitempty"`
	// Proxies tells, per node, whether its proxy is running.
	Proxies map[string]ProxyStatus `json:"proxies,omitempty"`
	// Problems says, for each node that is not well (its agent down, its proxy restarting, ...), what is wrong,
	// in words a user can act on.
	Problems map[string]string `json:"problems,omitempty"`
	// BPFFS is where the ebpf dataplane pins its maps: the lab's own bpf filesystem, with a directory per node
	// ("" means Cilium's own place on every node, /sys/fs/bpf).
	BPFFS string `json:"bpffs,omitempty"`
}

// NodeNames are the names of the lab's nodes, for ResolveNode.
func (s Status) NodeNames() []string {
	names := make([]string, len(s.Nodes))
	for i, n := range s.Nodes {
		names[i] = n.Name
	}
	return names
}

// DefaultCiliumMaps is where a Cilium node pins its maps.
const DefaultCiliumMaps = "/sys/fs/bpf/tc/globals"

// CiliumMaps is the directory holding a node's pinned Cilium maps, "" on a lab whose nodes run no Cilium agent.
func (s Status) CiliumMaps(node string) string {
	if face, _ := engines.Lab(s.Dataplane); face.Agent != dataplanes.AgentCilium {
		return ""
	}
	if s.BPFFS == "" {
		return DefaultCiliumMaps
	}
	return filepath.Join(s.BPFFS, node, "tc", "globals")
}

// ProxyStatus is the state of one node's Service proxy.
type ProxyStatus struct {
	Running bool `json:"running"`
}

// Streams are the standard streams of a command run in a node.
type Streams struct {
	In       io.Reader
	Out, Err io.Writer
}

// ExposeOptions describe `k8sguide nodeport`: expose a Deployment as a NodePort Service, as
// `kubectl expose deployment NAME --type=NodePort --port=PORT` does.
type ExposeOptions struct {
	Namespace             string
	Deployment            string
	Service               string // defaults to Deployment
	Port                  int32
	TargetPort            int32 // defaults to Port, as kubectl expose does
	NodePort              int32 // 0: allocate one
	ExternalTrafficPolicy v1.ServiceExternalTrafficPolicy
}

// Reply is what answered one HTTP request made from the lab's client.
type Reply struct {
	Pod    string `json:"pod"`    // the pod that served it
	Client string `json:"client"` // the source address the pod saw (SNAT shows here)
}

// Workloads are the Kubernetes objects of a lab. Kind answers from its apiserver; netns keeps them on disk.
type Workloads interface {
	// Apply creates or updates ConfigMaps, Deployments and Services, as `kubectl apply` would, and returns once
	// the Deployments' pods are ready. Of thousands of objects it says how far it got on progress.
	Apply(ctx context.Context, configMaps []*v1.ConfigMap, deployments []*appsv1.Deployment, services []*v1.Service, progress io.Writer) error
	Scale(ctx context.Context, namespace, deployment string, replicas int32) error
	// Expose makes the NodePort Service; one that exists already and is what it would make (the guide's own
	// `kubectl expose`) is used as it is, and created says which.
	Expose(ctx context.Context, opts ExposeOptions) (svc *v1.Service, created bool, err error)
	Deployments(ctx context.Context) ([]appsv1.Deployment, error)
	Pods(ctx context.Context) ([]v1.Pod, error)
	Services(ctx context.Context) ([]v1.Service, error)
	EndpointSlices(ctx context.Context) ([]discoveryv1.EndpointSlice, error)
}

// Provider builds and runs labs. Every method that takes a lab name fails with a *NotFoundError when there
// is no such lab.
type Provider interface {
	// Name is the provider's name: "netns" or "kind".
	Name() string
	// Create builds a lab and starts its proxies; on any failure it removes what it made.
	Create(ctx context.Context, cfg Config, progress io.Writer) error
	// Delete removes everything the lab is made of.
	Delete(ctx context.Context, name string) error
	// List names the labs that exist.
	List(ctx context.Context) ([]string, error)
	// Status reports a lab's nodes and proxies.
	Status(ctx context.Context, name string) (Status, error)
	// Exec runs argv in a node (or the lab's client), like `docker exec NODE argv...`, or in a pod. target is a
	// node or the client by full or short name (ResolveNode), else a pod by name, or pod/NAME (PodRef).
	Exec(ctx context.Context, name, node string, argv []string, streams Streams) error
	// Workloads gives access to the lab's Kubernetes objects.
	Workloads(ctx context.Context, name string) (Workloads, error)
	// ToolPath is the path, inside node (or the client), of a k8sguide binary that runs there: the collector
	// and the kernel tracer run as its `internal` commands.
	ToolPath(ctx context.Context, name, node string) (string, error)
	// Kubeconfig is a kubeconfig for the lab's apiserver, for use from this host.
	Kubeconfig(ctx context.Context, name string) ([]byte, error)
	// Get makes one HTTP request to addr ("IP:PORT") from the lab's client and says who answered.
	Get(ctx context.Context, name, addr string) (Reply, error)
}

// FirstLine is the first non-blank line of a tool's message, trimmed: errors are one line.
func FirstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return ""
}

// NotFoundError says that a named lab or node does not exist.
type NotFoundError struct {
	Kind, Name string
	Known      []string
	// Suggest is the known name the user probably meant ("" when none is close).
	Suggest string
}

func (e *NotFoundError) Error() string {
	switch {
	case len(e.Known) == 0:
		return fmt.Sprintf("no %s named %q", e.Kind, e.Name)
	case e.Suggest != "":
		return fmt.Sprintf("no %s named %q (did you mean %q? known: %v)", e.Kind, e.Name, e.Suggest, e.Known)
	}
	return fmt.Sprintf("no %s named %q (known: %v)", e.Kind, e.Name, e.Known)
}
