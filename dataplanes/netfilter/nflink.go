package netfilter

// KernelTable is an nf_tables table as the kernel lists it (see KernelTables).
type KernelTable struct {
	Family string // ip, ip6, inet, arp, bridge, netdev
	Name   string
	Handle int
}

// KernelChain is an nf_tables base chain as the kernel lists it (see KernelBaseChains).
type KernelChain struct {
	Family, Table string
	TableHandle   int
	Name          string
	Handle        int
	// Hook is the kernel's hook number (NF_INET_PRE_ROUTING … for families ip, ip6 and inet), Priority the
	// chain's.
	Hook     int
	Priority int
}

// Created is when the chain was created, as its handles say.
func (c KernelChain) Created() Creation { return Creation{Table: c.TableHandle, Chain: c.Handle} }

// inetHooks are the hooks of families ip, ip6 and inet by number (enum nf_inet_hooks).
var inetHooks = []Hook{Prerouting, Input, Forward, Output, Postrouting}

// NetfilterHook is the chain's hook, for a chain of family ip, ip6 or inet.
func (c KernelChain) NetfilterHook() (Hook, bool) {
	if (c.Family != "ip" && c.Family != "ip6" && c.Family != "inet") || c.Hook < 0 || c.Hook >= len(inetHooks) {
		return "", false
	}
	return inetHooks[c.Hook], true
}
