// Package helminstall installs Cilium's chart (package chart: version, source, values) into a kind cluster with
// Helm's Go SDK, renders it client-side as `helm template` does, and waits for the agents and the operator.
// Only k8sguide-lab links it (its `cilium-chart` command, which `k8sguide up --provider kind` runs).
package helminstall
