//go:build linux

package vmtest

// What a guest needs to be a lab node of kube-proxy's ipvs engine (and its iptables engine, whose rules it
// shares), with the k8sguide tools that inspect and trace it. Tests that run a node's proxy in the VM boot with
// these, plus their own binaries.

// NodeModules are IPVS with the schedulers kube-proxy offers, conntrack and NAT, ipsets of the types
// kube-proxy makes, iptables-nft's nf_tables and xt modules, and the links of a lab: veth pairs, the dummy
// kube-ipvs0, the pods' bridge with br_netfilter.
var NodeModules = []string{
	"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "nf_conntrack", "nf_nat", "nf_conntrack_netlink",
	"ip_set", "ip_set_hash_ip", "ip_set_hash_ipport", "ip_set_hash_ipportip", "ip_set_hash_ipportnet",
	"ip_set_hash_net", "ip_set_bitmap_port", "xt_set",
	"nf_tables", "nft_compat", "nft_chain_nat", "nft_ct", "xt_comment", "xt_mark", "xt_addrtype",
	"xt_conntrack", "xt_MASQUERADE", "xt_nat", "xt_multiport", "xt_tcpudp", "xt_physdev", "xt_statistic",
	"xt_recent", "xt_nfacct", "nf_reject_ipv4", "ipt_REJECT", "nft_reject_ipv4", "nft_masq", "nft_nat",
	"veth", "dummy", "bridge", "br_netfilter",
}

// NodeTools are the programs the proxier, the lab and the collector run (nsenter starts a node's agent), and
// what `trace --verify` runs (xtables-monitor under stdbuf, which preloads its library).
var NodeTools = []string{
	"iptables", "iptables-save", "iptables-restore", "iptables-nft", "iptables-nft-save", "iptables-nft-restore",
	"ip6tables", "ip6tables-save", "ip6tables-restore", "ipset", "ipvsadm", "ip", "nsenter", "nft", "conntrack",
	"xtables-monitor", "stdbuf", "/usr/libexec/coreutils/libstdbuf.so",
}
