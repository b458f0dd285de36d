package lab

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes"
)

func TestResolveNode(t *testing.T) {
	nodes := []string{"ipt-control-plane", "ipt-worker", "ipt-worker2", "ipt-client"}
	for _, tc := range []struct {
		arg, want, wantErr string
	}{
		{"ipt-worker2", "ipt-worker2", ""},
		{"worker2", "ipt-worker2", ""},
		{"worker", "ipt-worker", ""},
		{"control-plane", "ipt-control-plane", ""},
		{"client", "ipt-client", ""},
		// A name of another lab is not taken for this lab's short name.
		{"k8s-guide-worker2", "", `no node named "k8s-guide-worker2" (known: [ipt-control-plane ipt-worker ipt-worker2 ipt-client])`},
		{"worker3", "", `no node named "worker3" (did you mean "worker"? known: [ipt-control-plane ipt-worker ipt-worker2 ipt-client])`},
		{"wroker2", "", `no node named "wroker2" (did you mean "worker2"? known: [ipt-control-plane ipt-worker ipt-worker2 ipt-client])`},
		{"ipt-wroker2", "", `(did you mean "ipt-worker2"? known:`},
		{"contrl-plane", "", `(did you mean "control-plane"? known:`},
		{"Worker2", "", `(did you mean "worker2"? known:`},
		// Nothing close: no guess, the list.
		{"master", "", `no node named "master" (known: [ipt-control-plane ipt-worker ipt-worker2 ipt-client])`},
		{"", "", `no node named "" (known:`},
	} {
		got, err := ResolveNode(nodes, "ipt", tc.arg)
		if tc.wantErr == "" {
			if err != nil || got != tc.want {
				t.Errorf("ResolveNode(%q) = %q, %v; want %q", tc.arg, got, err, tc.want)
			}
			continue
		}
		var nf *NotFoundError
		if err == nil || !errors.As(err, &nf) || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("ResolveNode(%q) = %q, %v; want an error with %q", tc.arg, got, err, tc.wantErr)
		}
	}
	if _, err := ResolveNode(nil, "ipt", "worker"); err == nil || err.Error() != `no node named "worker"` {
		t.Errorf("no nodes: %v", err)
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"", "abc", 3}, {"worker2", "worker", 1}, {"wroker", "worker", 2}, {"kitten", "sitting", 3}} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestPodRef(t *testing.T) {
	for _, tc := range []struct {
		in, ns, name string
		ok           bool
	}{
		{"pod/web-1", "", "web-1", true},
		{"pod/default/web-1", "default", "web-1", true},
		{"web-1", "", "", false},
		{"pod/", "", "", false},
		{"pod/default/", "", "", false},
		{"pod//web-1", "", "", false},
		{"pod/a/b/c", "", "", false},
	} {
		ns, name, ok := PodRef(tc.in)
		if ns != tc.ns || name != tc.name || ok != tc.ok {
			t.Errorf("PodRef(%q) = %q, %q, %v; want %q, %q, %v", tc.in, ns, name, ok, tc.ns, tc.name, tc.ok)
		}
	}
}

// TestGuideAliases: the guide's aliases name the lab's last node and k8sguide's own commands, one per tool the
// guide watches the dataplane with.
func TestGuideAliases(t *testing.T) {
	for d, want := range map[dataplanes.Name][]string{
		dataplanes.IPTables: {"alias ipt='k8sguide exec --name k8s-guide k8s-guide-worker2 -- iptables -t nat -nvL'"},
		dataplanes.NFTables: {"alias nft-kp='k8sguide exec --name k8s-guide k8s-guide-worker2 -- nft list table ip kube-proxy'"},
		dataplanes.IPVS: {"alias ipv='k8sguide exec --name k8s-guide k8s-guide-worker2 -- ipvsadm -ln'",
			"alias ips='k8sguide exec --name k8s-guide k8s-guide-worker2 -- ipset list'"},
		dataplanes.EBPF: {"alias lb='k8sguide lb list --name k8s-guide --node k8s-guide-worker2'"},
	} {
		if got := GuideAliases("k8s-guide", d, 2); !slices.Equal(got, want) {
			t.Errorf("%s: %q, want %q", d, got, want)
		}
	}
	if got := GuideAliases("solo", dataplanes.IPTables, 0); len(got) != 1 || !strings.Contains(got[0], "solo-control-plane --") {
		t.Errorf("a lab of one node: %q", got)
	}
}
