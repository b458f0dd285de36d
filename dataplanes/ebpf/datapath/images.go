package datapath

// Cilium's images built from these sources (CiliumVersion's module: the agent, the operator, the CNI plugin and
// bpf/) by `make cilium-images` (lab/kind/nodeimage), for a kind lab where Cilium's registry (quay.io) cannot be
// reached. They carry the same tag as Cilium's own (CiliumVersion) under another repository, so that an image
// reference always says which build it is.
const (
	// LocalAgentRepository is the agent image's repository (Cilium's: quay.io/cilium/cilium).
	LocalAgentRepository = "k8sguide/cilium"
	// LocalOperatorRepository is the operator image's repository without the variant suffix the chart appends
	// (Cilium's: quay.io/cilium/operator, run as operator-generic).
	LocalOperatorRepository = "k8sguide/cilium-operator"
	// OperatorSuffix is the operator variant the chart runs on a cluster with no cloud IPAM: generic.
	OperatorSuffix = "-generic"
	// LocalImageKeyLabel holds the key of what a local image was built from; the build keeps an image whose key
	// matches.
	LocalImageKeyLabel = "dev.k8sguide.cilium-image.key"
)

// LocalImages are the references of the agent and operator images `make cilium-images` builds.
func LocalImages() (agent, operator string) {
	return LocalAgentRepository + ":" + CiliumVersion, LocalOperatorRepository + OperatorSuffix + ":" + CiliumVersion
}
