package netns

import "github.com/k8sguide/k8sguide/lab"

// labProgram finds k8sguide-lab, which the lab's namespaces run.
func (p *Provider) labProgram() (string, error) { return lab.FindLabProgram(p.Exe) }

// agentPath finds k8sguide-cilium: $K8SGUIDE_CILIUM_AGENT, beside the k8sguide binary, or on PATH.
func (p *Provider) agentPath() (string, error) {
	return lab.FindProgram(p.Exe, AgentName, AgentEnv, "the ebpf dataplane's node agent")
}
