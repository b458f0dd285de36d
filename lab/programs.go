package lab

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// LabProgram is k8sguide's second program (cmd/k8sguide-lab): what a netns lab's namespaces run (every node's
// init and agent, the control plane, kube-proxy, the pod servers) and the built-in kubectl. It is apart from the
// CLI so that no command a user types pays for linking and initialising the apiserver, etcd, kube-proxy and
// kubectl (`k8sguide --help` took 115 MB and 85 ms of CPU while they were in it); `make build` puts it beside
// k8sguide.
const LabProgram = "k8sguide-lab"

// LabProgramEnv overrides where k8sguide-lab is.
const LabProgramEnv = "K8SGUIDE_LAB_PROGRAM"

// FindLabProgram finds k8sguide-lab for the k8sguide binary exe.
func FindLabProgram(exe string) (string, error) {
	return FindProgram(exe, LabProgram, LabProgramEnv, "the programs a lab runs, and kubectl")
}

// FindProgram finds one of k8sguide's companion programs, name: $env, beside exe (the k8sguide binary, where
// `make build` puts them), or on PATH. what says what it is, for the error.
func FindProgram(exe, name, env, what string) (string, error) {
	if a := os.Getenv(env); a != "" {
		if _, err := os.Stat(a); err != nil {
			return "", fmt.Errorf("%s=%s: %w", env, a, err)
		}
		return a, nil
	}
	beside := filepath.Join(filepath.Dir(exe), name)
	if _, err := os.Stat(beside); err == nil {
		return beside, nil
	}
	if a, err := exec.LookPath(name); err == nil {
		return a, nil
	}
	return "", fmt.Errorf("%s (%s) not found beside %s or on PATH: build it with `make build` (or set %s)", name, what, exe, env)
}

// LabKubectl is the argument that makes k8sguide-lab kubectl: `k8sguide-lab kubectl ARGS…` is kubectl ARGS…
// against the kubeconfig $KUBECONFIG names.
const LabKubectl = "kubectl"

// LabCiliumChart is k8sguide-lab's command that fetches and installs Cilium's chart with Helm, for kind.
const LabCiliumChart = "cilium-chart"
