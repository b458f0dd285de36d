// Package netns is the lab provider that needs nothing but a Linux kernel and root: nodes, pods and the client are
// network namespaces, wired the way kind and kindnet wire a cluster, and each node's Service proxy is the upstream
// kube-proxy proxier (or Cilium's datapath) running in a process inside that node's namespace.
//
// This package is the CLI's side: it makes the namespaces, starts the lab's programs and reads their state.
// The programs themselves (each node's init and agent, kube-proxy, the control plane, the pod servers) are
// package node, which only k8sguide-lab links; layout_linux.go holds the files and names both sides use.
//
// Layout (lab "k8s-guide", 2 workers):
//
//	k8s-guide-client         br0 172.18.0.1/16           "the host" of the seeds: the Docker bridge side
//	k8s-guide-control-plane  eth0 172.18.0.2/16, cni0 10.244.0.1/24
//	k8s-guide-worker         eth0 172.18.0.3/16, cni0 10.244.1.1/24
//	k8s-guide-worker2        eth0 172.18.0.4/16, cni0 10.244.2.1/24
//	k8s-guide-pod-NAME       eth0 10.244.N.x/24 on its node's cni0 (hairpin on)
//
// Nodes route each other's pod CIDRs via the node network, as kindnet does, and default to the client. On an ebpf
// lab a node has no cni0 but Cilium's cilium_host (10.244.N.1/32) and cilium_net, and each pod a veth of its own
// (lxcHASH on the node, eth0 10.244.N.x/32 in the pod) carrying bpf_lxc, as Cilium's native routing wires them.
package netns
