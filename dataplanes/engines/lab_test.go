package engines_test

import (
	"regexp"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/engines"
)

// TestLabFaces checks what the providers, the scenario runner and the guide take from every engine's lab face
// without asking again: a title, a short name that fits a lab name, kube-proxy's mode or an agent (not both), and
// aliases a shell accepts, each running one thing; and, from the Live face, where counters finds the kernel's
// record of the choices.
func TestLabFaces(t *testing.T) {
	shortName := regexp.MustCompile(`^[a-z0-9]{1,4}$`)
	aliasName := regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
	shorts := map[string]dataplanes.Name{}
	for _, e := range engines.All {
		d, face := e.Name(), e.Lab()
		if face.Title == "" {
			t.Errorf("%s: no Title", d)
		}
		if !shortName.MatchString(face.Short) {
			t.Errorf("%s: Short %q: want 1 to 4 of [a-z0-9] (a lab name is at most 32 characters)", d, face.Short)
		}
		if other, dup := shorts[face.Short]; dup {
			t.Errorf("%s: Short %q is %s's too: two labs of one scenario would share a name", d, face.Short, other)
		}
		shorts[face.Short] = d
		if (face.KubeProxyMode == "") == (face.Agent == "") {
			t.Errorf("%s: KubeProxyMode %q, Agent %q: a node runs kube-proxy or the dataplane's agent", d, face.KubeProxyMode, face.Agent)
		}
		for _, a := range face.Aliases {
			if !aliasName.MatchString(a.Name) {
				t.Errorf("%s: alias %q is not a shell name", d, a.Name)
			}
			if (len(a.Node) == 0) == (len(a.Command) == 0) {
				t.Errorf("%s: alias %s: want a node command or a k8sguide command", d, a.Name)
			}
		}
		live := e.Live()
		if live.CountingTable == "" && live.NoCounts == "" {
			t.Errorf("%s: Live: no CountingTable and no NoCounts: counters would say nothing of the rules' counts", d)
		}
		if !live.Conntrack && live.Choices == nil {
			t.Errorf("%s: Live: neither Conntrack nor Choices: counters would have no kernel record of the choices", d)
		}
		if (live.Choices == nil) != (live.Record == "") {
			t.Errorf("%s: Live: Choices and Record go together (Record says what Choices reads)", d)
		}
		if _, ok := e.(dataplanes.Explainer); !ok {
			t.Errorf("%s: no Explainer: its traces would be told without sentences", d)
		}
	}
}

// TestParse: --dataplane takes a name of the list and nothing else, and says what it wants.
func TestParse(t *testing.T) {
	for _, d := range engines.Names() {
		if got, err := engines.Parse(string(d)); err != nil || got != d {
			t.Errorf("Parse(%q) = %q, %v", d, got, err)
		}
	}
	_, err := engines.Parse("cilium")
	if want := `unknown dataplane "cilium" (want one of iptables, nftables, ipvs, ebpf)`; err == nil || err.Error() != want {
		t.Errorf("Parse(cilium): %v, want %s", err, want)
	}
}
