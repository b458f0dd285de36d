package podnet

import (
	"encoding/json"
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func node(name, ip, cidr string) v1.Node {
	return v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1.NodeSpec{PodCIDR: cidr},
		Status:     v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeHostName, Address: name}, {Type: v1.NodeInternalIP, Address: ip}}},
	}
}

func TestPlanFor(t *testing.T) {
	nodes := []v1.Node{
		node("lab-worker2", "172.18.0.4", "10.244.2.0/24"),
		node("lab-control-plane", "172.18.0.2", "10.244.0.0/24"),
		node("lab-worker", "172.18.0.3", "10.244.1.0/24"),
		node("lab-worker3", "172.18.0.5", ""), // no pod CIDR yet: nothing to route
	}
	p := PlanFor(nodes, "172.18.0.3")
	if p.PodCIDR != "10.244.1.0/24" {
		t.Errorf("own pod CIDR %q, want 10.244.1.0/24", p.PodCIDR)
	}
	want := []Route{
		{CIDR: netip.MustParsePrefix("10.244.0.0/24"), Via: netip.MustParseAddr("172.18.0.2"), Node: "lab-control-plane"},
		{CIDR: netip.MustParsePrefix("10.244.2.0/24"), Via: netip.MustParseAddr("172.18.0.4"), Node: "lab-worker2"},
	}
	if len(p.Routes) != len(want) {
		t.Fatalf("routes %v, want %v", p.Routes, want)
	}
	for i := range want {
		if p.Routes[i] != want[i] {
			t.Errorf("route %d: %v, want %v", i, p.Routes[i], want[i])
		}
	}
}

func TestCNIConfig(t *testing.T) {
	data, err := CNIConfig("10.244.1.0/24", 1500)
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		Name    string `json:"name"`
		Plugins []struct {
			Type string `json:"type"`
			MTU  int    `json:"mtu"`
			IPAM struct {
				Type   string                `json:"type"`
				Ranges [][]map[string]string `json:"ranges"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(data, &conf); err != nil {
		t.Fatal(err)
	}
	if len(conf.Plugins) != 2 || conf.Plugins[0].Type != "ptp" || conf.Plugins[1].Type != "portmap" {
		t.Fatalf("plugins: %s", data)
	}
	if p := conf.Plugins[0]; p.IPAM.Type != "host-local" || p.IPAM.Ranges[0][0]["subnet"] != "10.244.1.0/24" || p.MTU != 1500 {
		t.Errorf("ptp: %s", data)
	}
	if _, err := CNIConfig("fd00::/64", 0); err == nil {
		t.Error("an IPv6 pod CIDR was taken")
	}
}

func TestMasqRules(t *testing.T) {
	chain, post := MasqRules([]string{"10.244.0.0/16"})
	if len(chain) != 2 || chain[0][1] != "10.244.0.0/16" || chain[0][len(chain[0])-1] != "RETURN" || chain[1][len(chain[1])-1] != "MASQUERADE" {
		t.Errorf("chain: %q", chain)
	}
	if post[len(post)-1] != MasqChain {
		t.Errorf("POSTROUTING: %q", post)
	}
}
