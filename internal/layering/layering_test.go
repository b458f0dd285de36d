package layering

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/k8sguide/k8sguide"

// rule forbids every package under a folder to link (directly or through others) any package with one of the
// forbidden prefixes.
type rule struct {
	under     string
	forbidden []string
	why       string
	exact     bool // the package under itself, not the folders below it
}

var rules = []rule{
	{under: "dataplanes", forbidden: []string{module + "/inspect", module + "/lab", module + "/cmd"},
		why: "the engines stand below everything that reads a node or builds a lab"},
	{under: "lab", forbidden: []string{module + "/inspect", module + "/cmd"},
		why: "a lab knows nothing of how it is inspected"},
	{under: "inspect", forbidden: []string{module + "/cmd", module + "/lab/netns", module + "/lab/kind", module + "/lab/providers",
		"sigs.k8s.io/kind/", "helm.sh/helm/", "k8s.io/kubernetes/pkg/proxy"},
		why: "the inspector works offline on a snapshot: providers, Helm, kind and the upstream proxiers are the lab's"},
	{under: "inspect/render", forbidden: []string{"k8s.io/client-go/"},
		why: "the renderer draws a trace, a snapshot's objects or a doctor's report offline: a lab's client (client-go) is not its to link"},
	{under: "lab", exact: true, forbidden: []string{"k8s.io/client-go/"},
		why: "package lab holds the contracts and names the offline inspector reads too (--node, pod/NAME): the kubeconfig files are lab/kubeconfig's"},
	{under: "scenarios", forbidden: []string{module + "/lab/netns", module + "/lab/kind", module + "/lab/providers", "sigs.k8s.io/kind/"},
		why: "the scenario runner drives the k8sguide binary as a student would: a lab's provider is the binary's, not the runner's"},
	{under: "cmd/k8sguide", forbidden: labPrograms,
		why: "the CLI runs k8sguide-lab for these rather than linking them: every command would pay for their initialisation"},
}

func init() {
	// The ground the engines stand on (the contract, the trace model, a node's network, the netfilter walker) links
	// no engine: an engine is added on top of it (CONTRIBUTING.md), never woven into it.
	for _, ground := range []string{"dataplanes", "dataplanes/trace", "dataplanes/netstate", "dataplanes/netfilter"} {
		rules = append(rules, rule{under: ground, exact: true, why: "the ground links no engine: the registry (dataplanes/engines) does",
			forbidden: []string{module + "/dataplanes/engines", module + "/dataplanes/iptables", module + "/dataplanes/nftables", module + "/dataplanes/ipvs", module + "/dataplanes/ebpf"}})
	}
	// What reads a snapshot or a pasted dump works offline: no lab's client.
	for _, offline := range []string{"inspect/tracer", "inspect/stages", "inspect/snapshot", "inspect/paste", "inspect/request"} {
		rules = append(rules, rule{under: offline, forbidden: []string{"k8s.io/client-go/rest", "k8s.io/client-go/transport"},
			why: "the offline inspector reads a snapshot or a pasted dump: the client-go transport is a live lab's"})
	}
}

// labPrograms are what only k8sguide-lab links: a netns lab's node agents, kube-proxy and control plane,
// kubectl, and Helm (kind's Cilium install): --help took 115 MB and 85 ms of CPU while the CLI linked them.
var labPrograms = []string{module + "/lab/netns/node", module + "/lab/controlplane/server", module + "/dataplanes/kubeproxy",
	"k8s.io/kubernetes/cmd/kube-", "k8s.io/kubernetes/pkg/proxy", "k8s.io/kubernetes/pkg/controller", "go.etcd.io/etcd/server",
	"k8s.io/kubectl/pkg/cmd", "k8s.io/apiserver/pkg/server", "helm.sh/helm/", module + "/dataplanes/ebpf/chart/helminstall"}

// TestImportsPointDown checks the rules on the linux and darwin builds (build tags choose different files).
func TestImportsPointDown(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to list the packages with")
	}
	for _, goos := range []string{"linux", "darwin"} {
		t.Run(goos, func(t *testing.T) {
			deps := list(t, goos)
			checked := 0
			for pkg, ds := range deps {
				for _, r := range rules {
					if r.exact && pkg != module+"/"+r.under || !within(pkg, module+"/"+r.under) {
						continue
					}
					checked++
					for _, d := range ds {
						for _, f := range r.forbidden {
							if strings.HasPrefix(d, f) {
								t.Errorf("%s links %s: %s", strings.TrimPrefix(pkg, module+"/"), d, r.why)
							}
						}
					}
				}
			}
			// A pattern that matched nothing would pass every rule.
			if checked < 15 {
				t.Fatalf("only %d packages checked; go list found %d", checked, len(deps))
			}
		})
	}
}

func within(pkg, folder string) bool { return pkg == folder || strings.HasPrefix(pkg, folder+"/") }

// list maps each of the module's packages to all it links, as `go list -deps` reports them for goos.
func list(t *testing.T, goos string) map[string][]string {
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", module+"/...")
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH=arm64", "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, stderr.String())
	}
	deps := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 {
			deps[f[0]] = f[1:]
		}
	}
	return deps
}
