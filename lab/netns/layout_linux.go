package netns

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/controlplane"
	"github.com/k8sguide/k8sguide/lab/state"
)

// The files and names a netns lab's two sides share: the CLI that starts and inspects the lab (this package) and
// the programs that run in it (package node) agree on them here.

// ControlPlaneConfig is the control plane of a lab: its files beside the lab's state, on the first node.
func ControlPlaneConfig(store state.Store, cfg lab.Config, nodes []lab.Node) controlplane.Config {
	return controlplane.Config{
		Dir:              store.Dir(cfg.Name) + "/control-plane",
		ClusterName:      cfg.Name,
		NodeName:         nodes[0].Name,
		AdvertiseAddress: nodes[0].IP,
		ServiceSubnet:    lab.ServiceSubnet,
		PodSubnet:        lab.PodSubnet,
		NodePortRange:    cfg.NodePortRange,
	}
}

// ProxyManifest is where `up` writes the command line of a node's proxy, once the node can run it (the ebpf
// dataplane's needs the node's compiled datapath): the lab's static pod manifest for it.
func ProxyManifest(store state.Store, labName, node string) string {
	return filepath.Join(store.Dir(labName), "proxy-"+node+".json")
}

func ProxyLog(store state.Store, labName, node string) string {
	return filepath.Join(store.Dir(labName), "proxy-"+node+".log")
}

// ProxyRecord is the record of the node's running proxy.
func ProxyRecord(store state.Store, labName, node string) string {
	return ProcRecordPath(store, labName, "proxy-"+node)
}

// ControlPlaneRecord is the record of the running control plane.
func ControlPlaneRecord(store state.Store, labName string) string {
	return ProcRecordPath(store, labName, "control-plane")
}

// writeProxyManifest hands a node's agent its proxy's command line.
func writeProxyManifest(store state.Store, labName, node string, argv []string) error {
	return WriteJSON(ProxyManifest(store, labName, node), argv)
}

// InitStatus is what a node's init tells commands about its agent.
type InitStatus struct {
	// AgentPID is the running agent's pid (0 while it is down).
	AgentPID int `json:"agentPID"`
	// Restarts counts the agent's restarts since the node started.
	Restarts int `json:"restarts"`
	// LastExit is how the last agent ended ("" if none has).
	LastExit string `json:"lastExit,omitempty"`
	// RestartAt is when the init starts the agent again, while it is down.
	RestartAt *time.Time `json:"restartAt,omitempty"`
}

func InitStatusPath(store state.Store, labName, node string) string {
	return filepath.Join(store.Dir(labName), "init-"+node+".json")
}

func readInitStatus(store state.Store, labName, node string) (InitStatus, bool) {
	var s InitStatus
	return s, readJSON(InitStatusPath(store, labName, node), &s)
}

// PodNamespace is the network namespace of a pod of lab labName: named after the pod's UID (pod names repeat
// across Kubernetes namespaces and over time), so it is recognisably the lab's and nothing else's.
func PodNamespace(labName string, uid types.UID) string { return labName + "-pod-" + string(uid) }

// podNamespacePattern matches the pod namespaces of lab labName and nothing else: a UID is 36 characters of hex
// and dashes, and no lab name is long enough to make "LAB-pod-" + 36 characters one of another lab's node names.
func podNamespacePattern(labName string) *regexp.Regexp {
	return regexp.MustCompile(`^` + regexp.QuoteMeta(labName) + `-pod-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
}

// podNamespaces lists the pod namespaces of a lab that exist now.
func podNamespaces(labName string) ([]string, error) {
	entries, err := os.ReadDir(netnsDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	re := podNamespacePattern(labName)
	var out []string
	for _, e := range entries {
		if re.MatchString(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// The kubelet's container restart back-off: 10 s doubling to 5 min, forgotten after 10 min of running.
const (
	restartBackoff     = 10 * time.Second
	restartBackoffMax  = 5 * time.Minute
	restartBackoffIdle = 10 * time.Minute
)
