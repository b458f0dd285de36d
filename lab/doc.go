// Package lab defines what a k8sguide lab is, independently of the machinery that builds it: a small Kubernetes
// cluster (one control-plane node and N workers) whose Service dataplane is one real proxy engine, plus a client
// that plays the host outside the cluster. Providers (netns, kind) implement Provider.
package lab
