package ebpf

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// jhashInitval is JHASH_INITVAL in bpf/lib/jhash.h (Bob Jenkins' lookup3, as the Linux kernel has it).
const jhashInitval = 0xdeadbeef

// jhashFinal is __jhash_final.
func jhashFinal(a, b, c uint32) uint32 {
	c ^= b
	c -= bits.RotateLeft32(b, 14)
	a ^= c
	a -= bits.RotateLeft32(c, 11)
	b ^= a
	b -= bits.RotateLeft32(a, 25)
	c ^= b
	c -= bits.RotateLeft32(b, 16)
	a ^= c
	a -= bits.RotateLeft32(c, 4)
	b ^= a
	b -= bits.RotateLeft32(a, 14)
	c ^= b
	c -= bits.RotateLeft32(b, 24)
	return c
}

// Jhash3Words is jhash_3words of bpf/lib/jhash.h: __jhash_nwords(a, b, c, initval + JHASH_INITVAL + (3 << 2)).
func Jhash3Words(a, b, c, initval uint32) uint32 {
	iv := initval + jhashInitval + 3<<2
	return jhashFinal(a+iv, b+iv, c+iv)
}

// MaglevHash is the hash lb4_select_backend_id_maglev() takes modulo the LUT size:
//
//	__hash_from_tuple_v4(tuple, sport, dport) = jhash_3words(tuple->saddr, ((u32)dport << 16) | sport,
//	                                                         tuple->nexthdr, CONFIG(hash_init4_seed))
//
// The C's words are network-order bytes loaded into host integers: saddr is the address's 4 bytes read as a
// u32 in the CPU's order, the ports are the 2 wire bytes read as a u16. sport is the packet's source port (0
// when the service has session affinity), dport its destination port: the CT tuple keeps the ports swapped,
// and lb4_select_backend_id_maglev swaps them back. order is the byte order of the machine the datapath runs
// on (little-endian for every Cilium node).
func MaglevHash(order binary.ByteOrder, saddr netip.Addr, sport, dport uint16, nexthdr uint8, seed uint32) uint32 {
	a4 := saddr.As4()
	var p [2]byte
	be.PutUint16(p[:], sport)
	s := uint32(order.Uint16(p[:]))
	be.PutUint16(p[:], dport)
	d := uint32(order.Uint16(p[:]))
	return Jhash3Words(order.Uint32(a4[:]), d<<16|s, uint32(nexthdr), seed)
}
