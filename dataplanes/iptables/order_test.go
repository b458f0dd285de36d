package iptables

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
)

// The nf_tables handles the collector reads beside iptables-nft-save give each base chain its creation; a
// snapshot without them (an older k8sguide's), and iptables-legacy's tables, say why theirs is not known.
func TestBaseChainsCarryCreation(t *testing.T) {
	save := "*nat\n:PREROUTING ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n-A PREROUTING -j KUBE-SERVICES\n-A POSTROUTING -j KUBE-POSTROUTING\n:KUBE-SERVICES - [0:0]\n:KUBE-POSTROUTING - [0:0]\nCOMMIT\n"
	chains := []netfilter.KernelChain{
		{Family: "ip", Table: "nat", TableHandle: 2, Name: "PREROUTING", Handle: 1, Hook: 0, Priority: -100},
		{Family: "ip", Table: "nat", TableHandle: 2, Name: "POSTROUTING", Handle: 4, Hook: 4, Priority: 100},
		{Family: "ip", Table: "kube-proxy", TableHandle: 9, Name: "nat-prerouting", Handle: 3, Hook: 0, Priority: -100},
		{Family: "ip6", Table: "nat", TableHandle: 5, Name: "PREROUTING", Handle: 1, Hook: 0, Priority: -100},
	}
	handles := formatHandles(chains, savedTables(save))
	if handles != "nat POSTROUTING 2 4\nnat PREROUTING 2 1" {
		t.Errorf("handles %q: want iptables-nft's ip tables' base chains only", handles)
	}
	open := func(p Part) map[string]netfilter.BaseChain {
		t.Helper()
		raw, _ := json.Marshal(p)
		o, err := Engine{}.Open(raw, dataplanes.OpenOptions{Node: "n"})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]netfilter.BaseChain{}
		for _, rs := range o.Rulesets {
			for _, c := range rs.BaseChains() {
				out[c.Table+"/"+c.Name] = c
			}
		}
		return out
	}
	got := open(Part{"nf_tables": save, HandlesKey: handles})
	if c := got["nat/PREROUTING"]; c.Created != (netfilter.Creation{Table: 2, Chain: 1}) || c.OrderUnknown != "" {
		t.Errorf("nat/PREROUTING: %+v %q", c.Created, c.OrderUnknown)
	}
	if c := got["nat/POSTROUTING"]; c.Created != (netfilter.Creation{Table: 2, Chain: 4}) {
		t.Errorf("nat/POSTROUTING: %+v", c.Created)
	}
	for part, why := range map[string]string{"nf_tables": "older k8sguide", "legacy": "iptables-legacy", "input": "nft -a list ruleset"} {
		c := open(Part{part: save})["nat/PREROUTING"]
		if c.Created.Known() || !strings.Contains(c.OrderUnknown, why) {
			t.Errorf("%s without handles: %+v %q, want a reason naming %q", part, c.Created, c.OrderUnknown, why)
		}
	}
}
