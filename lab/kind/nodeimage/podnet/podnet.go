// Package podnet is the pod network of k8sguide's offline kind node image, in the place of kind's kindnetd
// (whose source the module proxy does not serve; see lab/kind/nodeimage). It does what kindnetd does, and
// nothing more:
//
//   - writes the node's CNI configuration: the ptp plugin (a veth per pod, routed, no bridge) with host-local
//     addresses from the node's pod CIDR and a default route, then portmap: kindnet's own configuration;
//   - routes every other node's pod CIDR via that node's address on the node network;
//   - masquerades what pods send outside the cluster's pod network (kindnet's masquerade agent: a nat chain
//     KIND-MASQ-AGENT that POSTROUTING sends every packet not for a local address to, which RETURNs for the pod
//     subnet and MASQUERADEs the rest), so a pod's source is the node's address past the node network.
//
// What kindnetd also does and this does not: NetworkPolicy (kindnetd enforces it; here policies are accepted by
// the apiserver and not enforced), IPv6 and dual-stack.
package podnet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"

	v1 "k8s.io/api/core/v1"
)

// ConfigFile is where the node's CNI configuration goes (kindnetd's name for it: the kubelet, through
// containerd, reads the first configuration of /etc/cni/net.d).
const ConfigFile = "/etc/cni/net.d/10-kindnet.conflist"

// MasqChain is the nat chain of the masquerade rules, kindnet's.
const MasqChain = "KIND-MASQ-AGENT"

// CNIConfig is the node's CNI configuration for its pod CIDR: ptp and host-local as kindnet writes them, with the
// node network's MTU when known (0: the kernel's default).
func CNIConfig(podCIDR string, mtu int) ([]byte, error) {
	prefix, err := netip.ParsePrefix(podCIDR)
	if err != nil || !prefix.Addr().Is4() {
		return nil, fmt.Errorf("pod CIDR %q: want an IPv4 prefix", podCIDR)
	}
	ptp := map[string]any{
		"type":   "ptp",
		"ipMasq": false,
		"ipam": map[string]any{
			"type":    "host-local",
			"dataDir": "/run/cni-ipam-state",
			"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
			"ranges":  [][]map[string]string{{{"subnet": prefix.Masked().String()}}},
		},
	}
	if mtu > 0 {
		ptp["mtu"] = mtu
	}
	conf := map[string]any{
		"cniVersion": "0.3.1",
		"name":       "kindnet",
		"plugins": []any{
			ptp,
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// WriteConfig writes data to file unless it already holds it, atomically: a CNI configuration half written would
// be read by containerd as it is.
func WriteConfig(file string, data []byte) (changed bool, err error) {
	if old, err := os.ReadFile(file); err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return false, err
	}
	// An extension containerd does not read while it is written, then a rename.
	tmp := file + ".temp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return false, err
	}
	return true, os.Rename(tmp, file)
}

// Route is one other node's pod CIDR and the node address it is reached through.
type Route struct {
	CIDR netip.Prefix
	Via  netip.Addr
	Node string
}

// Plan is what a node needs from the cluster's Nodes: its own pod CIDR, and a route to every other node's.
type Plan struct {
	PodCIDR string
	Routes  []Route
}

// PlanFor reads the Nodes as kindnetd does: the node whose InternalIP is hostIP is this one (its pod CIDR goes
// to the CNI configuration); every other node with an InternalIP and a pod CIDR gets a route.
func PlanFor(nodes []v1.Node, hostIP string) Plan {
	var p Plan
	for _, n := range nodes {
		ip := internalIP(n)
		if !ip.IsValid() || n.Spec.PodCIDR == "" {
			continue
		}
		if ip.String() == hostIP {
			p.PodCIDR = n.Spec.PodCIDR
			continue
		}
		cidr, err := netip.ParsePrefix(n.Spec.PodCIDR)
		if err != nil || !cidr.Addr().Is4() {
			continue
		}
		p.Routes = append(p.Routes, Route{CIDR: cidr.Masked(), Via: ip, Node: n.Name})
	}
	sort.Slice(p.Routes, func(i, j int) bool { return p.Routes[i].Node < p.Routes[j].Node })
	return p
}

func internalIP(n v1.Node) netip.Addr {
	for _, a := range n.Status.Addresses {
		if a.Type == v1.NodeInternalIP {
			if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Is4() {
				return ip
			}
		}
	}
	return netip.Addr{}
}

// MasqRules are the rules of MasqChain for the pod subnets, in order, and the POSTROUTING rule that sends to it,
// as iptables arguments (go-iptables appends them to table nat).
func MasqRules(podSubnets []string) (chain [][]string, postrouting []string) {
	for _, s := range podSubnets {
		chain = append(chain, []string{"-d", s, "-m", "comment", "--comment", "k8sguide-podnet: pod-to-pod traffic keeps its source", "-j", "RETURN"})
	}
	chain = append(chain, []string{"-m", "comment", "--comment", "k8sguide-podnet: traffic leaving the pod network is masqueraded (last in the chain)", "-j", "MASQUERADE"})
	postrouting = []string{"-m", "addrtype", "!", "--dst-type", "LOCAL", "-m", "comment", "--comment", "k8sguide-podnet: traffic not for this node goes through " + MasqChain, "-j", MasqChain}
	return chain, postrouting
}
