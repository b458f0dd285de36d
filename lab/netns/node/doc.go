// Package node is what runs inside a netns lab: a node's init and agent (the kubelet's part: the node's
// registration, lease and pods, each pod a network namespace running a pod server), the node's Service proxy
// (upstream kube-proxy) and the control plane (lab/controlplane/server). It is linked into k8sguide-lab, the
// program the lab's namespaces run, and never into the CLI, which only starts it (package netns): so that no
// k8sguide command pays for the control plane's and kube-proxy's initialisation.
package node
