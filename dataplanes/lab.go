package dataplanes

// Lab is an engine's lab face: what a lab runs on each node for the dataplane, what a host needs for it, and how
// the guide names and watches it. The providers, `doctor`, `up`'s checks, the scenario runner and the renderers
// read it through package engines instead of switching on the dataplane's name, so a new engine is described in
// its own folder (its Engine's Lab method) and nowhere else.
type Lab struct {
	// Title is the guide's name for the dataplane ("kube-proxy iptables").
	Title string
	// Short names the dataplane in the labs the scenario runner makes ("ipt"): a lab name is a DNS label of at
	// most 32 characters, so at most 4.
	Short string
	// KubeProxyMode is upstream kube-proxy's --proxy-mode that implements the dataplane on a node; "" when
	// Agent replaces kube-proxy.
	KubeProxyMode string
	// Agent names the node agent that replaces kube-proxy and the lab's default CNI (AgentCilium); "" for
	// kube-proxy. A provider that cannot run the agent says so rather than start kube-proxy.
	Agent string
	// LBAlgorithms are what `up --lb-algorithm` may choose, the default first; none: the flag is not this
	// dataplane's (kube-proxy's modes choose at random, IPVS by its scheduler).
	LBAlgorithms []string
	// Tools are the host commands a netns lab of the dataplane runs in its nodes (`doctor` looks for them).
	Tools []Tool
	// Aliases are the guide's shell aliases for watching a node's dataplane, printed under a new lab.
	Aliases []Alias
}

// AgentCilium is Cilium's agent: its datapath replaces kube-proxy (kube-proxy replacement) and it routes the pod
// network itself (no kindnet).
const AgentCilium = "cilium"

// Tool is a host command and the Debian package that has it.
type Tool struct{ Command, Package string }

// Alias is one of the guide's aliases: Node runs a command in the lab's last node (`k8sguide exec`), or Command
// runs a k8sguide command given that node (`--name LAB --node NODE`).
type Alias struct {
	Name    string
	Node    []string
	Command []string
}

// ReplacesKubeProxy says a node runs the dataplane's own agent rather than kube-proxy.
func (l Lab) ReplacesKubeProxy() bool { return l.Agent != "" }
