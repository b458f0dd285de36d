// Package dataplanes holds what every engine of k8sguide shares: the dataplane names. Each engine lives in its own
// folder (iptables, nftables, ipvs, ebpf) on the ground below them all (trace, netstate, netfilter); package
// kubeproxy runs the upstream kube-proxy proxiers as a node's Service proxy.
package dataplanes

import (
	"fmt"
	"strings"
)

// Name names an engine that implements Services on a node.
type Name string

const (
	IPTables Name = "iptables"
	NFTables Name = "nftables"
	IPVS     Name = "ipvs"
	EBPF     Name = "ebpf"
)

// Names lists every engine k8sguide knows, in the order the guide presents them.
var Names = []Name{IPTables, NFTables, IPVS, EBPF}

// Parse checks a --dataplane value.
func Parse(s string) (Name, error) {
	for _, d := range Names {
		if string(d) == s {
			return d, nil
		}
	}
	return "", fmt.Errorf("unknown dataplane %q (want one of %s)", s, List())
}

// List is Names for a message or a flag's help: "iptables, nftables, ipvs, ebpf".
func List() string {
	s := make([]string, len(Names))
	for i, n := range Names {
		s[i] = string(n)
	}
	return strings.Join(s, ", ")
}
