package netns

import (
	"context"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf/datapath"
	"github.com/k8sguide/k8sguide/lab"
)

// TestUncachedObjects: up plans every node's objects and counts those it would compile (bpf_host and bpf_lxc
// not yet in the cache; bpf_sock is the lab's own) before it compiles them, to say that the first ebpf lab waits
// for clang; an object compiled from its plan is counted no more.
func TestUncachedObjects(t *testing.T) {
	if _, err := datapath.FindClang(); err != nil {
		t.Skipf("no clang for Cilium's datapath (%v): nothing is compiled", err)
	}
	t.Setenv(datapath.CacheEnv, t.TempDir())
	nodes := []lab.Node{
		{Name: "unc-control-plane", IP: "172.18.0.2", PodCIDR: "10.244.0.0/24"},
		{Name: "unc-worker", IP: "172.18.0.3", PodCIDR: "10.244.1.0/24"},
		{Name: "unc-worker2", IP: "172.18.0.4", PodCIDR: "10.244.2.0/24"},
	}
	cookie := func(string) (uint64, error) { return 4096, nil }
	objects, err := planObjects(nodes, t.TempDir(), cookie)
	if err != nil {
		t.Fatal(err)
	}
	if len(objects) != 9 {
		t.Fatalf("%d objects planned, want 9 (bpf_host, bpf_lxc and bpf_sock for 3 nodes)", len(objects))
	}
	if got := uncachedObjects(objects); got != 6 {
		t.Fatalf("an empty cache lacks %d objects, want 6 (bpf_host and bpf_lxc for 3 nodes)", got)
	}
	for _, o := range objects {
		if o.node == "unc-worker" && o.plan.Program() == datapath.LXC {
			if _, err := o.plan.Compile(context.Background(), o.dir); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := uncachedObjects(objects); got != 5 {
		t.Errorf("with one node's bpf_lxc compiled, %d objects are said to lack, want 5", got)
	}
}
