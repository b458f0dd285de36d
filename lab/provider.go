package lab

import (
	"context"
	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/engines"
	"io"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"path/filepath"
)

// What a provider builds and answers: nodes, a lab's status, its workloads.

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

// Status summarises a lab.
type Status struct {
	Name      string          `json:"name"`
	Provider  string          `json:"provider"`
	Dataplane dataplanes.Name `json:"dataplane"`
	Nodes     []Node          `json:"nodes"`
	// NodePortAddresses is kube-proxy's --nodeport-addresses where the provider knows it (nil: unset).
	NodePortAddresses []string `json:"nodePortAddresses,omitempty"`
	// NodePortRange is the apiserver's --service-node-port-range ("": not known; see ShapeReader).
	NodePortRange string `json:"nodePortRange,omitempty"`
	// LBAlgorithm is Cilium's load-balancing algorithm on a lab whose nodes run Cilium, "random" or "maglev"
	// ("": no Cilium, or not known; see ShapeReader).
	LBAlgorithm string `json:"lbAlgorithm,omitempty"`
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

// ShapeReader is a provider whose Status leaves out part of a lab's shape (NodePortAddresses, NodePortRange,
// LBAlgorithm) because reading it back from the lab costs what the commands that call Status do not need:
// ReadShape fills it in st, leaving what it cannot read unknown. (A netns lab's Status has it from its state.)
type ShapeReader interface {
	ReadShape(ctx context.Context, name string, st *Status) error
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
