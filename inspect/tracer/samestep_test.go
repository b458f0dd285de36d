package tracer

import (
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// TestSameStepIptablesNft: on a kind nftables node the packet also meets iptables-nft's tables (the pod network's
// and kind's own rules), which the walk reads as iptables-save prints them and nft's trace prints as nft
// translates them. Events and hops from `trace --verify -o json` on kn-worker and kn-worker2 of a kind nftables
// lab (node → its own NodePort; pod → another node's NodePort).
func TestSameStepIptablesNft(t *testing.T) {
	for _, tc := range []struct {
		hop  trace.Hop
		ev   trace.KernelEvent
		want bool
	}{
		{trace.Hop{Table: "filter", Chain: "OUTPUT", Rule: 1, Text: "-A OUTPUT -j KUBE-FIREWALL", Verdict: "jump KUBE-FIREWALL"},
			trace.KernelEvent{Table: "ip filter", Chain: "OUTPUT", Kind: "rule", Text: "jump KUBE-FIREWALL", Verdict: "jump KUBE-FIREWALL"}, true},
		{trace.Hop{Table: "filter", Chain: "OUTPUT", Text: "policy ACCEPT", Verdict: "policy accept"},
			trace.KernelEvent{Table: "ip filter", Chain: "OUTPUT", Kind: "policy", Text: "policy accept", Verdict: "accept"}, true},
		{trace.Hop{Table: "nat", Chain: "KIND-MASQ-AGENT", Rule: 2, Text: "-A KIND-MASQ-AGENT -j MASQUERADE", Verdict: "masquerade to 172.18.0.2"},
			trace.KernelEvent{Table: "ip nat", Chain: "KIND-MASQ-AGENT", Kind: "rule", Text: "counter masquerade", Verdict: "accept"}, true},
		// Not the same step: another table, chain, verdict or kind.
		{trace.Hop{Table: "filter", Chain: "OUTPUT", Rule: 1, Text: "-A OUTPUT -j KUBE-FIREWALL", Verdict: "jump KUBE-FIREWALL"},
			trace.KernelEvent{Table: "ip nat", Chain: "OUTPUT", Kind: "rule", Text: "jump KUBE-FIREWALL", Verdict: "jump KUBE-FIREWALL"}, false},
		{trace.Hop{Table: "nat", Chain: "POSTROUTING", Rule: 2, Text: "-A POSTROUTING -j KIND-MASQ-AGENT", Verdict: "jump KIND-MASQ-AGENT"},
			trace.KernelEvent{Table: "ip nat", Chain: "POSTROUTING", Kind: "rule", Text: "jump DOCKER_POSTROUTING", Verdict: "jump DOCKER_POSTROUTING"}, false},
		{trace.Hop{Table: "nat", Chain: "KIND-MASQ-AGENT", Rule: 2, Text: "-A KIND-MASQ-AGENT -j MASQUERADE", Verdict: "masquerade to 172.18.0.2"},
			trace.KernelEvent{Table: "ip nat", Chain: "KIND-MASQ-AGENT", Kind: "rule", Text: "return", Verdict: "return"}, false},
		{trace.Hop{Table: "filter", Chain: "OUTPUT", Text: "policy ACCEPT", Verdict: "policy accept"},
			trace.KernelEvent{Table: "ip filter", Chain: "OUTPUT", Kind: "rule", Text: "accept", Verdict: "accept"}, false},
		// nftables' own tables still compare by rule text.
		{trace.Hop{Table: "ip kube-proxy", Chain: "nat-output", Rule: 1, Text: "jump services", Verdict: "jump services"},
			trace.KernelEvent{Table: "ip kube-proxy", Chain: "nat-output", Kind: "rule", Text: "jump services", Verdict: "jump services"}, true},
		{trace.Hop{Table: "ip kube-proxy", Chain: "nat-output", Rule: 1, Text: "jump services", Verdict: "jump services"},
			trace.KernelEvent{Table: "ip kube-proxy", Chain: "nat-output", Kind: "rule", Text: "ct state new jump services", Verdict: "jump services"}, false},
	} {
		if got := sameStep(tc.hop, tc.ev); got != tc.want {
			t.Errorf("sameStep(%s/%s %q, %s/%s %q) = %v, want %v", tc.hop.Table, tc.hop.Chain, tc.hop.Text, tc.ev.Table, tc.ev.Chain, tc.ev.Text, got, tc.want)
		}
	}
}
