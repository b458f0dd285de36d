// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Runs Cilium's own jhash (bpf/lib/jhash.h) in the kernel, for jhash_test.go.
 *
 * Packet bytes in: saddr[4] and sport[2], dport[2] in network order (as in the IP and L4 headers), nexthdr[1],
 * pad[3], seed[4] in host order. The words are loaded from memory the way the datapath loads its CT tuple, and
 * combined as __hash_from_tuple_v4() does: jhash_3words(saddr, ((u32)dport << 16) | sport, nexthdr, seed).
 * The return value is the hash (BPF_PROG_TEST_RUN's retval).
 */
#include <bpf/ctx/skb.h>
#include <bpf/api.h>
#include <lib/jhash.h>

__section("tc")
int jhash_probe(struct __sk_buff *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 saddr, seed;
	__u16 sport, dport;
	__u8 nexthdr;

	if (data + 16 > data_end)
		return 0;
	saddr = *(__u32 *)data;
	sport = *(__u16 *)(data + 4);
	dport = *(__u16 *)(data + 6);
	nexthdr = *(__u8 *)(data + 8);
	seed = *(__u32 *)(data + 12);
	return (int)jhash_3words(saddr, ((__u32)dport << 16) | sport, nexthdr, seed);
}

BPF_LICENSE("Dual BSD/GPL");
