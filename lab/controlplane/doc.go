// Package controlplane describes a netns lab's Kubernetes control plane: where it keeps its certificates,
// kubeconfigs and etcd data, and where it listens. Package server runs it. The two are apart so that the CLI,
// which only needs the paths, does not link (and initialise, on every command) the apiserver, etcd, the
// controller-manager and the scheduler: those live in k8sguide-lab, the program a lab's nodes run.
package controlplane
