// Package server runs a netns lab's Kubernetes control plane as kind's control-plane node runs it, but in one
// process: embedded etcd, kube-apiserver, kube-controller-manager and kube-scheduler from k8s.io/kubernetes, with
// flags, certificates and kubeconfigs made by kubeadm's own phases (the ones `kubeadm init` runs inside a kind
// node). The process runs in the control-plane node's network namespace and serves on the node's address. It is
// linked into k8sguide-lab only (cmd/k8sguide-lab), never into the CLI.
package server
