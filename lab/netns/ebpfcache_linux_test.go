package netns

import (
	"context"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf/datapath"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/workload"
)

// TestUncachedObjects: up counts the objects a lab would compile (bpf_host and bpf_lxc per node, not yet in the
// cache) before it compiles them, to say that the first ebpf lab waits for clang; a compiled object is counted
// no more.
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
	if got := uncachedObjects(nodes); got != 6 {
		t.Fatalf("an empty cache lacks %d objects, want 6 (bpf_host and bpf_lxc for 3 nodes)", got)
	}
	gw, err := workload.Gateway(nodes[1].PodCIDR)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := datapath.Compile(context.Background(), objectOptions(nodes[1], gw, datapath.LXC), datapath.CacheDir()); err != nil {
		t.Fatal(err)
	}
	if got := uncachedObjects(nodes); got != 5 {
		t.Errorf("with one node's bpf_lxc compiled, %d objects are said to lack, want 5", got)
	}
}
