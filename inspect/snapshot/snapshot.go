// Package snapshot is the versioned document `k8sguide snapshot` writes: everything a trace needs from one
// node, as plain data, so that a trace from it needs no root and no lab.
package snapshot

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/netstate"
	"github.com/k8sguide/k8sguide/dataplanes/nftables"
)

// Version names the snapshot format. v2 keeps each engine's part under engines, by dataplane name; v1 (until
// November 2026) had a field per engine at the top level, which Parse still reads.
const (
	Version   = "k8sguide.snapshot/v2"
	VersionV1 = "k8sguide.snapshot/v1"
)

// Snapshot is one node's dataplane state.
type Snapshot struct {
	Version   string          `json:"version"`
	Node      string          `json:"node,omitempty"`
	Lab       string          `json:"lab,omitempty"`
	Dataplane dataplanes.Name `json:"dataplane,omitempty"` // what the lab says the node runs; "" when unknown
	TakenAt   time.Time       `json:"takenAt,omitzero"`

	// Engines holds each engine's part, as that engine wrote it (see its Part type): iptables' dumps per
	// backend, the nftables ruleset, the IPVS table, Cilium's maps.
	Engines map[dataplanes.Name]json.RawMessage `json:"engines,omitempty"`

	Net        netstate.State `json:"net"`
	Kubernetes *Kubernetes    `json:"kubernetes,omitempty"`
	// Missing says what could not be collected, and why.
	Missing []string `json:"missing,omitempty"`
	// Read says, for a pasted dump, what was stripped around it and how each output in it was read.
	Read []string `json:"read,omitempty"`

	// sniffed holds what the engines' Sniff parsed a pasted dump's parts from (dataplanes.Sniffed.Parsed), for
	// the first Open of each part.
	sniffed *sniffedParts
}

type sniffedParts struct {
	mu     sync.Mutex
	parsed map[dataplanes.Name]any
}

// KeepSniffed keeps what an engine's Sniff parsed its part from, for the part's first Open (TakeSniffed).
func (s *Snapshot) KeepSniffed(name dataplanes.Name, parsed any) {
	if parsed == nil {
		return
	}
	if s.sniffed == nil {
		s.sniffed = &sniffedParts{parsed: map[dataplanes.Name]any{}}
	}
	s.sniffed.mu.Lock()
	defer s.sniffed.mu.Unlock()
	s.sniffed.parsed[name] = parsed
}

// TakeSniffed returns what KeepSniffed kept for an engine's part, once: a walk may change it in place.
func (s *Snapshot) TakeSniffed(name dataplanes.Name) any {
	if s.sniffed == nil {
		return nil
	}
	s.sniffed.mu.Lock()
	defer s.sniffed.mu.Unlock()
	parsed := s.sniffed.parsed[name]
	delete(s.sniffed.parsed, name)
	return parsed
}

// Part is an engine's part, nil when the snapshot has none.
func (s *Snapshot) Part(name dataplanes.Name) json.RawMessage { return s.Engines[name] }

// v1 is the part of a k8sguide.snapshot/v1 document that v2 moved: the engines' parts, each at the top level.
type v1 struct {
	Iptables        json.RawMessage `json:"iptables"`
	NftablesText    string          `json:"nftablesText"`
	NftablesOmitted []string        `json:"nftablesOmitted"`
	Nftables        json.RawMessage `json:"nftables"`
	EBPF            json.RawMessage `json:"ebpf"`
	IPVS            json.RawMessage `json:"ipvs"`
}

// Parse reads a snapshot document of either version. It returns ErrNotSnapshot for JSON that has no version (a
// pasted dump, for the engines to sniff).
func Parse(data []byte) (*Snapshot, error) {
	var s Snapshot
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, err
	}
	switch s.Version {
	case Version:
		return &s, nil
	case VersionV1:
		var old v1
		if err := json.Unmarshal(data, &old); err != nil {
			return nil, err
		}
		s.Version, s.Engines = Version, map[dataplanes.Name]json.RawMessage{}
		// The parts are what the v1 fields held: the same JSON, under the engine's name (nftables' three
		// fields become its Part's).
		keep := func(name dataplanes.Name, raw json.RawMessage) {
			if len(raw) > 0 && string(raw) != "null" {
				s.Engines[name] = raw
			}
		}
		keep(dataplanes.IPTables, old.Iptables)
		if old.NftablesText != "" || len(old.NftablesOmitted) > 0 || len(old.Nftables) > 0 {
			raw, err := json.Marshal(nftables.Part{Text: old.NftablesText, Omitted: old.NftablesOmitted, JSON: old.Nftables})
			if err != nil {
				return nil, err
			}
			keep(dataplanes.NFTables, raw)
		}
		keep(dataplanes.IPVS, old.IPVS)
		keep(dataplanes.EBPF, old.EBPF)
		return &s, nil
	case "":
		return nil, ErrNotSnapshot
	}
	return nil, fmt.Errorf("snapshot version %s: this k8sguide reads %s and %s", s.Version, Version, VersionV1)
}

// ErrNotSnapshot says a JSON document is not a k8sguide snapshot.
var ErrNotSnapshot = errors.New("not a k8sguide snapshot")

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
