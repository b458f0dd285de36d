package iptables

import "testing"

// The listing is `iptables-nft -t nat -S CHAIN -v` for three chains, and want what `iptables-nft-save -c -t nat`
// printed for them, both from iptables v1.8.9 (nf_tables) in a scratch network namespace (2026-11-29): the
// counters come after the matches in a listing, "-c 0 0" inside a quoted comment is the comment's.
func TestChainSaveIsIptablesSave(t *testing.T) {
	listing := `-P PREROUTING ACCEPT -c 5 300
-A PREROUTING -c 7 420 -j KUBE-SVC-X
-N KUBE-SVC-X
-A KUBE-SVC-X -m comment --comment "default/web -c 0 0" -m statistic --mode random --probability 0.33333333349 -c 0 0 -j KUBE-SEP-Y
-A KUBE-SVC-X -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -c 12 720 -j KUBE-SEP-Y
-N KUBE-SEP-Y
-A KUBE-SEP-Y -p tcp -m tcp -c 0 0 -j DNAT --to-destination 10.244.1.2:80
`
	want := `:PREROUTING ACCEPT [5:300]
[7:420] -A PREROUTING -j KUBE-SVC-X
:KUBE-SVC-X - [0:0]
[0:0] -A KUBE-SVC-X -m comment --comment "default/web -c 0 0" -m statistic --mode random --probability 0.33333333349 -j KUBE-SEP-Y
[12:720] -A KUBE-SVC-X -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j KUBE-SEP-Y
:KUBE-SEP-Y - [0:0]
[0:0] -A KUBE-SEP-Y -p tcp -m tcp -j DNAT --to-destination 10.244.1.2:80
`
	if got := chainSave(listing); got != want {
		t.Errorf("chainSave:\n%s\nwant:\n%s", got, want)
	}
	// A rule with no counters (a listing without -v) counts nothing; a line that is not a rule is dropped.
	if _, rule := listingToSave("-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000"); rule != "[0:0] -A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000" {
		t.Errorf("rule without counters: %q", rule)
	}
	if decl, rule := listingToSave("# Warning: iptables-legacy tables present"); decl != "" || rule != "" {
		t.Errorf("not a rule: %q %q", decl, rule)
	}
	got := scopedSave(map[string]string{
		HandlesKey:       "ignored",
		"nat/PREROUTING": ":PREROUTING ACCEPT [0:0]\n",
		"nat/KUBE-SVC-X": "", // tried, not read
		"filter/FORWARD": ":FORWARD ACCEPT [0:0]\n",
	})
	if want := "*filter\n:FORWARD ACCEPT [0:0]\nCOMMIT\n*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n"; got != want {
		t.Errorf("scopedSave:\n%s\nwant:\n%s", got, want)
	}
}
