// Package chart is how k8sguide installs Cilium on a kind cluster, for `k8sguide up --provider kind --dataplane
// ebpf`: the chart's version, where it comes from and the values the lab installs it with. Package helminstall
// installs it with Helm's Go SDK; it runs in k8sguide-lab (`k8sguide-lab cilium-chart`), so that the CLI does
// not link Helm (50 packages, kubectl's and controller-runtime's among them) and every command's start-up with it.
//
// Why: on kind the ebpf dataplane is the real thing, not a model of it. Cilium runs as the CNI and as the
// kube-proxy replacement (kind is created without kube-proxy), so Services are load-balanced by Cilium's
// eBPF datapath exactly as on a production node. The chart is pinned to datapath.CiliumVersion, the same
// Cilium release whose bpf_host.c the netns engine compiles, so what the lab shows in its network
// namespaces and what the kind cluster runs are the same datapath.
//
// The values are deliberately few (see Values): everything else stays at Cilium's defaults, so the lab
// shows the datapath a stock Cilium install has.
package chart

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf/datapath"
)

// ChartRepo is where Install fetches the chart from: Cilium's OCI chart registry. Cilium documents it next
// to the classic repository (https://helm.cilium.io); with OCI, Helm's SDK pulls exactly one artifact by
// tag (registry.Client.Pull) and needs no repositories.yaml, no index.yaml download and no repository cache.
const ChartRepo = "oci://quay.io/cilium/charts/cilium"

// ReleaseName and Namespace are the Helm release Cilium is installed as; kube-system is where Cilium's
// documentation installs it (its agents are system-node-critical).
const (
	ReleaseName = "cilium"
	Namespace   = "kube-system"
)

// APIServerPort is the port kind's kube-apiserver listens on inside the control-plane node container.
const APIServerPort = 6443

// Version is the chart version Install pins: datapath.CiliumVersion without its "v" ("1.20.2"); Cilium
// publishes the chart with the same version as the release.
func Version() string {
	return strings.TrimPrefix(datapath.CiliumVersion, "v")
}

// Options are what the lab decides.
type Options struct {
	// ClusterName is the kind cluster's name. Its API server is the container <ClusterName>-control-plane,
	// port 6443, on kind's Docker network.
	ClusterName string
	// LBAlgorithm is "" (Cilium's default, random), "random" or "maglev": loadBalancer.algorithm.
	LBAlgorithm string
	// NodePortRange is "" (Cilium's default, 30000-32767) or "<min>-<max>", the format of kube-apiserver's
	// --service-node-port-range; it becomes nodePort.range "<min>,<max>", the chart's format.
	NodePortRange string
	// PodSubnet is the cluster's pod network (kind's podSubnet). When set, Cilium routes natively, as the lab's
	// other pod networks do (a route to each node's pod CIDR, no encapsulation); "" keeps the chart's VXLAN tunnel.
	PodSubnet string
	// Local installs the chart in Cilium's sources (SourceChartDir) with the images `make cilium-images` built
	// from them (datapath.LocalImages), which the lab has loaded into the nodes: no registry is asked. Otherwise
	// the chart and images Cilium publishes (ChartRepo, quay.io).
	Local bool
	// WithoutCapabilities are removed from every capability list of the chart's securityContext.capabilities
	// (the nodes cannot grant them; see lab/kind).
	WithoutCapabilities []string
	// NoSocketLB turns Cilium's socket LB off (socketLB.enabled false): the nodes share the cgroup namespace its
	// programs would attach to.
	NoSocketLB bool
}

// kind names a cluster's nodes <name>-control-plane, <name>-worker...; the node name is a Docker container
// name and the API server host Cilium dials, so keep it to a DNS label.
var clusterNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// Values returns the Helm values k8sguide installs Cilium with, or an error naming the first bad option.
// Every value is one that kind with kube-proxy replacement needs, or that the lab decides; the rest are
// the chart's defaults (tunnel routing with VXLAN, Hubble in the agent, Envoy DaemonSet, ...).
func Values(o Options) (map[string]any, error) {
	if o.ClusterName == "" {
		return nil, errors.New("cilium values: no kind cluster name")
	}
	if len(o.ClusterName)+len("-control-plane") > 63 || !clusterNameRE.MatchString(o.ClusterName) {
		return nil, fmt.Errorf("cilium values: kind cluster name %q is not a DNS label (lower-case letters, digits and '-')", o.ClusterName)
	}
	v := map[string]any{
		// The lab's kind cluster runs no kube-proxy: Cilium's eBPF datapath serves ClusterIP, NodePort,
		// ExternalIP and LoadBalancer Services (and socket-level LB). Cilium 1.14+ takes true/false here.
		"kubeProxyReplacement": true,
		// Without kube-proxy nothing implements the kubernetes Service's ClusterIP (10.96.0.1) until Cilium
		// runs, so Cilium must reach the API server directly: the control-plane node container, which
		// Docker's DNS on the kind network resolves by name. The chart puts these in the agent's and the
		// operator's KUBERNETES_SERVICE_HOST/PORT.
		"k8sServiceHost": o.ClusterName + "-control-plane",
		"k8sServicePort": APIServerPort,
		// kind's kube-controller-manager allocates each node's podCIDR from 10.244.0.0/16; Cilium's kind
		// guide uses them (ipam.mode=kubernetes) instead of its own cluster-pool 10.0.0.0/8, so pod IPs are
		// the ones `kubectl get nodes -o wide` and the lab show.
		"ipam": map[string]any{"mode": "kubernetes"},
		// Cilium's kind guide sets it so images loaded with `kind load docker-image` are used; it is also the
		// chart's default, pinned here because preloading depends on it.
		"image": map[string]any{"pullPolicy": "IfNotPresent"},
		// The operator is not on the datapath; one replica is plenty for a lab and halves its start-up cost
		// (the default 2 replicas must land on two different nodes).
		"operator": map[string]any{"replicas": 1},
		// Re-running `up` with another LB algorithm or NodePort range upgrades the release, which changes the
		// cilium-config ConfigMap; the agents only read it at start, so roll them when it changes.
		"rollOutCiliumPods": true,
		// No L7 proxy: the lab has no L7 policy, Ingress or Gateway, and without it the chart deploys no Envoy
		// DaemonSet (one more image and pod per node, which the images built from source do not include).
		// Services are load-balanced in eBPF either way.
		"l7Proxy": false,
	}
	if o.PodSubnet != "" {
		if _, err := netip.ParsePrefix(o.PodSubnet); err != nil {
			return nil, fmt.Errorf("cilium values: pod subnet %q: %v", o.PodSubnet, err)
		}
		// Native routing, as kindnet and the netns lab route pods: the nodes share kind's network, so Cilium
		// installs a route to each other node's pod CIDR (autoDirectNodeRoutes) and a packet for a pod on another
		// node leaves eth0 as it is. The chart's default, a VXLAN tunnel, would wrap it instead.
		v["routingMode"] = "native"
		v["autoDirectNodeRoutes"] = true
		v["ipv4NativeRoutingCIDR"] = o.PodSubnet
	}
	if o.NoSocketLB {
		v["socketLB"] = map[string]any{"enabled": false}
	}
	if o.Local {
		// The chart's image helpers join repository and tag (no digest: the images are the engine's own); the
		// operator's repository gets "-generic" (the variant for clusters without cloud IPAM) from the chart.
		tag := datapath.CiliumVersion
		v["image"] = map[string]any{"repository": datapath.LocalAgentRepository, "tag": tag, "useDigest": false, "pullPolicy": "IfNotPresent"}
		v["operator"].(map[string]any)["image"] = map[string]any{"repository": datapath.LocalOperatorRepository, "tag": tag, "useDigest": false, "pullPolicy": "IfNotPresent"}
	}
	switch o.LBAlgorithm {
	case "":
	case "random", "maglev":
		v["loadBalancer"] = map[string]any{"algorithm": o.LBAlgorithm}
	default:
		return nil, fmt.Errorf("cilium values: load-balancing algorithm %q is not random or maglev", o.LBAlgorithm)
	}
	if o.NodePortRange != "" {
		lo, hi, err := parsePortRange(o.NodePortRange)
		if err != nil {
			return nil, fmt.Errorf("cilium values: NodePort range %q: %v", o.NodePortRange, err)
		}
		// Cilium's agent takes --node-port-range as "min,max" (a string slice; the chart's values.yaml
		// documents range: "30000,32767").
		v["nodePort"] = map[string]any{"range": fmt.Sprintf("%d,%d", lo, hi)}
	}
	return v, nil
}

// parsePortRange parses "<min>-<max>" with 1 <= min < max <= 65535 (Cilium rejects max <= min).
func parsePortRange(s string) (lo, hi int, err error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, errors.New(`want "<min>-<max>", e.g. "30000-32767"`)
	}
	lo, err1 := strconv.Atoi(a)
	hi, err2 := strconv.Atoi(b)
	switch {
	case err1 != nil || err2 != nil:
		return 0, 0, errors.New(`want "<min>-<max>", e.g. "30000-32767"`)
	case lo < 1 || hi > 65535:
		return 0, 0, errors.New("ports must be within 1-65535")
	case hi <= lo:
		return 0, 0, errors.New("min port must be smaller than max port")
	}
	return lo, hi, nil
}

// SourceChartDir returns the Cilium chart in the Cilium sources the datapath is built from
// (datapath.Sources(): $K8SGUIDE_CILIUM_SRC or the Go module cache's github.com/cilium/cilium@CiliumVersion):
// install/kubernetes/cilium, the chart Cilium publishes as this release's chart.
func SourceChartDir() (string, error) {
	src, err := datapath.Sources()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(src, "install", "kubernetes", "cilium")
	if _, err := os.Stat(filepath.Join(dir, "Chart.yaml")); err != nil {
		return "", fmt.Errorf("no Cilium chart in %s: %v", dir, err)
	}
	return dir, nil
}
