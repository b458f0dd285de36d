// Package snapshot is the versioned document `k8sguide snapshot` writes: everything a trace needs from one
// node, as plain data, so that a trace from it needs no root and no lab.
package snapshot

import (
	"encoding/json"
	"net/netip"
	"time"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf"
	"github.com/k8sguide/k8sguide/dataplanes/ipvs"
	"github.com/k8sguide/k8sguide/dataplanes/netstate"
)

// Version names the snapshot format.
const Version = "k8sguide.snapshot/v1"

// Snapshot is one node's dataplane state.
type Snapshot struct {
	Version   string    `json:"version"`
	Node      string    `json:"node,omitempty"`
	Lab       string    `json:"lab,omitempty"`
	Dataplane string    `json:"dataplane,omitempty"` // what the lab says the node runs; "" when unknown
	TakenAt   time.Time `json:"takenAt,omitzero"`

	// Iptables holds `iptables-save -c` per backend ("nf_tables", "legacy") that has rules.
	Iptables map[string]string `json:"iptables,omitempty"`
	// NftablesText is `nft list ruleset`: the collector writes the text, without the tables iptables-nft
	// made (NftablesOmitted names them; Iptables holds their rules). Nftables is `nft -j list ruleset`,
	// which older snapshots carry (with `nft -a` text); a snapshot may hold either.
	NftablesText    string          `json:"nftablesText,omitempty"`
	NftablesOmitted []string        `json:"nftablesOmitted,omitempty"`
	Nftables        json.RawMessage `json:"nftables,omitempty"`
	// EBPF is Cilium's datapath on the node: its load-balancing and conntrack maps, the programs attached to
	// the interfaces and their load-time constants.
	EBPF *ebpf.State `json:"ebpf,omitempty"`
	// IPVS is the node's IPVS table (kube-proxy's IPVS mode): virtual servers, real servers and the kernel's
	// connection entries. Its ipsets are in Net.
	IPVS *ipvs.State `json:"ipvs,omitempty"`

	Net        netstate.State `json:"net"`
	Kubernetes *Kubernetes    `json:"kubernetes,omitempty"`
	// Missing says what could not be collected, and why.
	Missing []string `json:"missing,omitempty"`
}

// Kubernetes names what the rules point at.
type Kubernetes struct {
	// ClientIP is the address outside traffic comes from in a lab (the Docker bridge's gateway on kind).
	ClientIP string    `json:"clientIP,omitempty"`
	Nodes    []Node    `json:"nodes,omitempty"`
	Pods     []Pod     `json:"pods,omitempty"`
	Services []Service `json:"services,omitempty"`
}

// Node is a node of the lab or cluster.
type Node struct {
	Name string `json:"name"`
	IP   string `json:"ip"`
}

// Pod is a pod with an address.
type Pod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	IP        string `json:"ip"`
	Node      string `json:"node"`
}

// Service is a Service and its ports.
type Service struct {
	Namespace string        `json:"namespace"`
	Name      string        `json:"name"`
	ClusterIP string        `json:"clusterIP,omitempty"`
	Ports     []ServicePort `json:"ports,omitempty"`
}

// ServicePort is one port of a Service.
type ServicePort struct {
	Name     string `json:"name,omitempty"`
	Protocol string `json:"protocol"`
	Port     int32  `json:"port"`
	NodePort int32  `json:"nodePort,omitempty"`
}

// PodByIP names the pod (namespace/name) and node behind an address.
func (s *Snapshot) PodByIP(ip netip.Addr) (pod, node string) {
	if s.Kubernetes == nil {
		return "", ""
	}
	for _, p := range s.Kubernetes.Pods {
		if p.IP == ip.String() {
			return p.Namespace + "/" + p.Name, p.Node
		}
	}
	for _, n := range s.Kubernetes.Nodes {
		if n.IP == ip.String() {
			return "", n.Name
		}
	}
	return "", ""
}
