package nftables

import "github.com/k8sguide/k8sguide/dataplanes/netfilter"

// nfTables lists the namespace's nf_tables tables with one netlink dump (see netfilter.KernelTables).
func nfTables() ([]netfilter.KernelTable, error) { return netfilter.KernelTables() }
