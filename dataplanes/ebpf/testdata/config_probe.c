// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* A stand-in for bpf_host in collect_test.go: a program named cil_from_netdev with load-time constants declared
 * the way Cilium 1.20 declares them (lib/static_data.h: __config_NAME in .rodata.config, described by a BTF
 * Datasec), and a cilium_calls tail-call map, so that Collect can be tested without Cilium's loader.
 */
#include <bpf/ctx/skb.h>
#include <bpf/api.h>
#include <lib/static_data.h>

NODE_CONFIG(__u32, hash_init4_seed, "Cluster-wide IPv4 tuple hash seed sourced")
NODE_CONFIG(__u8, lb_default_alg, "Default load-balancer backend selection algorithm")
NODE_CONFIG(bool, lb_selection_per_service, "Enable per-service load-balancer backend selection algorithm")
NODE_CONFIG(__u16, nodeport_port_min, "Nodeport minimum port value.")
NODE_CONFIG(__u16, nodeport_port_max, "Nodeport maximum port value.")
NODE_CONFIG(__u64, some_u64, "an 8-byte variable")
DECLARE_CONFIG(__u32, interface_ifindex, "ifindex of the interface the bpf program is attached to")
DECLARE_CONFIG(bool, enable_no_service_endpoints_routable, "Enable routes when service has 0 endpoints")

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 64);
} cilium_calls __section_maps_btf;

__section("tc")
int cil_from_netdev(struct __sk_buff *ctx)
{
	if (CONFIG(lb_selection_per_service) || CONFIG(enable_no_service_endpoints_routable))
		tail_call_static(ctx, cilium_calls, 45);
	return (int)(CONFIG(hash_init4_seed) + CONFIG(lb_default_alg) + CONFIG(nodeport_port_min) +
		     CONFIG(nodeport_port_max) + CONFIG(interface_ifindex) + CONFIG(some_u64));
}

BPF_LICENSE("Dual BSD/GPL");
