package lab

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/engines"
)

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

// Validate checks what `up` is given, for any provider, and fills defaults. maxWorkers is the provider's limit.
func (cfg *Config) Validate(maxWorkers int) error {
	if err := ValidateName(cfg.Name); err != nil {
		return err
	}
	if cfg.Workers < 0 || cfg.Workers > maxWorkers {
		return fmt.Errorf("--workers %d: want 0 to %d", cfg.Workers, maxWorkers)
	}
	if cfg.NodePortRange == "" {
		cfg.NodePortRange = DefaultNodePortRange
	}
	// Parsed as the apiserver parses its --service-node-port-range, which the lab passes on.
	if _, err := utilnet.ParsePortRange(cfg.NodePortRange); err != nil {
		return fmt.Errorf("invalid --service-node-port-range %q: %w", cfg.NodePortRange, err)
	}
	if _, err := engines.Parse(string(cfg.Dataplane)); err != nil {
		return err
	}
	face, _ := engines.Lab(cfg.Dataplane)
	switch {
	case cfg.LBAlgorithm == "":
	case len(face.LBAlgorithms) == 0:
		return fmt.Errorf("--lb-algorithm needs --dataplane %s: the %s dataplane chooses a backend its own way (kube-proxy's iptables and nftables modes at random, IPVS by its scheduler)",
			strings.Join(choosers(), " or "), cfg.Dataplane)
	case !slices.Contains(face.LBAlgorithms, cfg.LBAlgorithm):
		return fmt.Errorf("--lb-algorithm %q: want %s", cfg.LBAlgorithm, strings.Join(face.LBAlgorithms, " or "))
	}
	if face.ReplacesKubeProxy() && len(cfg.NodePortAddresses) > 0 {
		return fmt.Errorf("--nodeport-addresses is kube-proxy's: the %s dataplane serves NodePorts on each node's address (and 0.0.0.0 for pods)", cfg.Dataplane)
	}
	for _, c := range cfg.NodePortAddresses {
		if c == "primary" {
			continue
		}
		if _, err := netip.ParsePrefix(c); err != nil {
			return fmt.Errorf("--nodeport-addresses: %q is not a CIDR (or \"primary\")", c)
		}
	}
	return nil
}

// choosers are the dataplanes whose load-balancing algorithm `up --lb-algorithm` chooses.
func choosers() []string {
	var names []string
	for _, e := range engines.All {
		if len(e.Lab().LBAlgorithms) > 0 {
			names = append(names, string(e.Name()))
		}
	}
	return names
}

// RunsCilium says the nodes of a lab of dataplane d run Cilium's agent in place of kube-proxy and the default
// CNI (the dataplane's lab face names the agent).
func RunsCilium(d dataplanes.Name) bool {
	face, _ := engines.Lab(d)
	return face.Agent == dataplanes.AgentCilium
}
