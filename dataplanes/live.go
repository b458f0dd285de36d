package dataplanes

import (
	"encoding/json"
	"net/netip"
)

// Live is an engine's face for what reads a running node (inspect/live): how its rules serve a Service, which the
// wait after deploy and nodeport checks, and where the kernel keeps its record of each endpoint choice, which
// `counters` reads. inspect/live asks these questions of every engine the same way, and never of an engine by name.
type Live struct {
	// PodsWalkClusterIPs: a packet from the node's pod network to a ClusterIP meets the rules a walk of it from
	// that network shows (netfilter's PREROUTING), so the wait checks each ClusterIP that way; false where a pod's
	// packets take a path of their own that such a walk does not show (Cilium's bpf_lxc on each pod's veth).
	PodsWalkClusterIPs bool
	// LocalFallsBackToAll: under a Local traffic policy, a node with no local endpoint sends to every ready one
	// (kube-proxy's IPVS proxier, kubernetes#97081, so the node's own pods still reach the Service) rather than
	// dropping.
	LocalFallsBackToAll bool
	// CountingTable is the table whose rules count the packets where a trace's paths part for their endpoints
	// (iptables' statistic cascade, in nat): counters reads their packet counters before and after its run.
	// "": the rules keep no count of their choices.
	CountingTable string
	// Conntrack: each connection the rules send to an endpoint leaves an entry in the node's conntrack table,
	// replied to by that endpoint (the netfilter dataplanes): the kernel's own record of each choice.
	Conntrack bool
	// Choices, when set, reads the engine's own record of its choices from a node's part (Cilium's conntrack
	// map): for each source port of client's connections to frontend, the choice it made. Record says, for the
	// counters table, what that record is.
	Choices func(part json.RawMessage, client netip.Addr, frontend netip.AddrPort) (map[uint16]Choice, error)
	Record  string
	// NoCounts says why the rules keep no count of their choices, when CountingTable is "".
	NoCounts string
}

// Choice is one of an engine's own records of an endpoint choice: the backend, and what tells a record renewed
// by a later connection from the same port (its lifetime).
type Choice struct {
	Backend  netip.AddrPort
	Lifetime uint32
}
