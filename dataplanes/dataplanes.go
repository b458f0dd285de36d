// Package dataplanes holds what every engine of k8sguide shares: the contract each engine implements (Engine, its
// optional faces, its lab face) and the names of the four the guide teaches, for code that must know one of
// them (a v1 snapshot's fields, an engine's own name); the list of dataplanes is package engines'. Each engine
// lives in its own folder (iptables, nftables, ipvs, ebpf) on the ground below them all (trace, netstate,
// netfilter); package kubeproxy runs the upstream kube-proxy proxiers as a node's Service proxy.
package dataplanes

// Name names an engine that implements Services on a node: a dataplane.
type Name string

const (
	IPTables Name = "iptables"
	NFTables Name = "nftables"
	IPVS     Name = "ipvs"
	EBPF     Name = "ebpf"
)
