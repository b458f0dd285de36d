package controlplane

import (
	"path/filepath"
	"strconv"

	kubeadmconstants "k8s.io/kubernetes/cmd/kubeadm/app/constants"
)

// KubernetesVersion is the version of the control plane built into k8sguide (k8s.io/kubernetes in go.mod).
const KubernetesVersion = "v1.36.4"

// Port is where the apiserver listens on the control-plane node, as on kind.
const Port = 6443

// Config is one lab's control plane.
type Config struct {
	// Dir holds everything the control plane keeps: pki/, etcd/ and the kubeconfigs.
	Dir              string
	ClusterName      string
	NodeName         string // the control-plane node
	AdvertiseAddress string // the control-plane node's address: where the apiserver listens and what it advertises
	ServiceSubnet    string
	PodSubnet        string
	NodePortRange    string
}

// The files of Dir.
func (c Config) PKIDir() string  { return filepath.Join(c.Dir, "pki") }
func (c Config) EtcdDir() string { return filepath.Join(c.Dir, "etcd") }

// AdminKubeconfig is kubeadm's admin.conf: the kubeadm:cluster-admins group, bound to cluster-admin at bootstrap.
func (c Config) AdminKubeconfig() string {
	return filepath.Join(c.Dir, kubeadmconstants.AdminKubeConfigFileName)
}

// SuperAdminKubeconfig is kubeadm's super-admin.conf (system:masters), used once to bind the admins' group.
func (c Config) SuperAdminKubeconfig() string {
	return filepath.Join(c.Dir, kubeadmconstants.SuperAdminKubeConfigFileName)
}

// NodeKubeconfig is the kubelet.conf of a node: user system:node:NAME in group system:nodes, which the apiserver's
// Node authorizer and NodeRestriction admission hold to its own Node, Lease and Pods.
func (c Config) NodeKubeconfig(node string) string {
	return filepath.Join(c.Dir, "kubelet-"+node+".conf")
}

// ProxyKubeconfig is kube-proxy's: user system:kube-proxy, which Kubernetes' bootstrap policy binds to the
// system:node-proxier role (kubeadm gives kube-proxy a ServiceAccount token with the same role instead; a
// certificate needs no token controller before the node's proxy can start).
func (c Config) ProxyKubeconfig() string { return filepath.Join(c.Dir, "kube-proxy.conf") }

// ControllerManagerKubeconfig and SchedulerKubeconfig are those components' kubeconfigs, as kubeadm names them.
func (c Config) ControllerManagerKubeconfig() string {
	return filepath.Join(c.Dir, kubeadmconstants.ControllerManagerKubeConfigFileName)
}

func (c Config) SchedulerKubeconfig() string {
	return filepath.Join(c.Dir, kubeadmconstants.SchedulerKubeConfigFileName)
}

// Server is the apiserver's address as the lab's nodes reach it.
func (c Config) Server() string { return "https://" + c.AdvertiseAddress + ":" + strconv.Itoa(Port) }
