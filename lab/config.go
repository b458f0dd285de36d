package lab

import (
	"fmt"
	"net/netip"

	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/k8sguide/k8sguide/dataplanes"
)

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
	switch {
	case cfg.LBAlgorithm == "":
	case cfg.Dataplane != dataplanes.EBPF:
		return fmt.Errorf("--lb-algorithm is Cilium's: it needs --dataplane ebpf (kube-proxy's iptables and nftables modes choose at random, IPVS by its scheduler)")
	case cfg.LBAlgorithm != LBRandom && cfg.LBAlgorithm != LBMaglev:
		return fmt.Errorf("--lb-algorithm %q: want random or maglev", cfg.LBAlgorithm)
	}
	if cfg.Dataplane == dataplanes.EBPF && len(cfg.NodePortAddresses) > 0 {
		return fmt.Errorf("--nodeport-addresses is kube-proxy's: the ebpf dataplane serves NodePorts on each node's address (and 0.0.0.0 for pods)")
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
