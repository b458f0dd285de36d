// Package ebpf reads Cilium's eBPF load-balancer maps (Cilium v1.20.2's bpf_host datapath) and walks a packet
// through them the way bpf_host's from-netdev NodePort path does.
//
// The map layouts are the project's own: importing Cilium's Go packages costs hundreds of packages and pins
// k8s.io versions (the nested module dataplanes/ebpf/cilium holds the code that needs them), so every key and
// value is decoded here by hand, with the byte order of each field written out. layout_test.go compares these
// layouts with the BTF of a freshly compiled bpf_host.o, so an upstream change fails loudly instead of decoding
// garbage.
package ebpf

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
)

// Map names as bpf_host.c pins them (LIBBPF_PIN_BY_NAME, under /sys/fs/bpf/tc/globals by default).
const (
	MapServices      = "cilium_lb4_services_v2"
	MapBackends      = "cilium_lb4_backends_v3"
	MapRevNAT        = "cilium_lb4_reverse_nat"
	MapAffinity      = "cilium_lb4_affinity"
	MapAffinityMatch = "cilium_lb_affinity_match"
	MapMaglev        = "cilium_lb4_maglev"
	MapCT            = "cilium_ct4_global"     // TCP (get_ct_map4)
	MapCTAny         = "cilium_ct_any4_global" // everything else
	MapSourceRange   = "cilium_lb4_source_range"
	MapEndpoints     = "cilium_lxc" // local endpoints: decides "backend is local" (no SNAT)
	// MapIPCache maps every address the node knows to its security identity: the socket LB's wildcard lookup
	// asks it whether an address is a node's (lookup_ip4_remote_endpoint).
	MapIPCache = "cilium_ipcache_v2"
	// MapCalls is the prefix of a program's tail-call array (cilium_calls_hostns_…, cilium_calls_netdev_…): the
	// walk names it where a tail call decides.
	MapCalls = "cilium_calls"
	// MapSockRevNAT is bpf_sock's: for each socket the socket LB connected to a backend, the frontend it asked
	// for (read back by getpeername and recvmsg; deleted when the socket is released).
	MapSockRevNAT = "cilium_lb4_reverse_sk"
)

// DefaultBPFFS is where Cilium pins its maps.
const DefaultBPFFS = "/sys/fs/bpf/tc/globals"

// Byte orders. "net" fields hold network-order bytes, exactly as in the packet (__be16, __be32 addresses);
// "host" fields are the CPU's order: the datapath and whoever wrote the map (the agent) share the machine.
// Cilium runs on little-endian machines only (x86-64, arm64); bit fields (ct_entry flags, the affinity key's
// netns_cookie) are decoded as the little-endian ABI lays them out.
var (
	be   = binary.BigEndian
	host = binary.NativeEndian
)

// Field is one field of a C struct as this package reads it: byte offset and size, or for a bit field the
// bit within the byte at Off and the width. layout_test.go checks every Field against the object's BTF.
type Field struct {
	Name string
	Off  int
	Size int
	Bit  int // bit fields only
	Bits int // >0: a bit field
}

// Layout is a C struct's size and the fields this package decodes.
type Layout struct {
	Struct string
	Size   int
	Fields []Field
}

// Offsets used by the codecs below; Layouts lists the same constants, so the BTF test checks the code itself.
const (
	sizeLB4Key          = 12
	sizeLB4Service      = 12
	sizeLB4Backend      = 12
	sizeLB4RevNAT       = 6
	sizeSockRevNATKey4  = 16
	sizeSockRevNAT4     = 8
	sizeCTTuple4        = 14
	sizeCTEntry         = 56
	sizeAffinityKey4    = 16
	sizeAffinityVal     = 16
	sizeAffinityMatch   = 8
	sizeEndpointKey     = 20
	sizeSourceRangeKey4 = 12
	sizeIPCacheKey      = 24
	sizeIPCacheInfo     = 24

	ctFlagsOff = 36 // the u16 holding ct_entry's bit fields
)

// Layouts are the structs bpf_host v1.20.2 uses for the maps this package reads.
var Layouts = []Layout{
	{"lb4_key", sizeLB4Key, []Field{
		{Name: "address", Off: 0, Size: 4}, {Name: "dport", Off: 4, Size: 2}, {Name: "backend_slot", Off: 6, Size: 2},
		{Name: "proto", Off: 8, Size: 1}, {Name: "scope", Off: 9, Size: 1}, {Name: "pad", Off: 10, Size: 2},
	}},
	{"lb4_service", sizeLB4Service, []Field{
		{Name: "backend_id", Off: 0, Size: 4}, {Name: "affinity_timeout", Off: 0, Size: 4}, {Name: "l7_lb_proxy_port", Off: 0, Size: 4},
		{Name: "count", Off: 4, Size: 2}, {Name: "rev_nat_index", Off: 6, Size: 2},
		{Name: "flags", Off: 8, Size: 1}, {Name: "flags2", Off: 9, Size: 1}, {Name: "qcount", Off: 10, Size: 2},
	}},
	{"lb4_backend", sizeLB4Backend, []Field{
		{Name: "address", Off: 0, Size: 4}, {Name: "port", Off: 4, Size: 2}, {Name: "proto", Off: 6, Size: 1},
		{Name: "flags", Off: 7, Size: 1}, {Name: "cluster_id", Off: 8, Size: 2}, {Name: "zone", Off: 10, Size: 1},
		{Name: "pad", Off: 11, Size: 1},
	}},
	{"lb4_reverse_nat", sizeLB4RevNAT, []Field{{Name: "address", Off: 0, Size: 4}, {Name: "port", Off: 4, Size: 2}}},
	{"ipv4_ct_tuple", sizeCTTuple4, []Field{
		{Name: "daddr", Off: 0, Size: 4}, {Name: "saddr", Off: 4, Size: 4}, {Name: "dport", Off: 8, Size: 2},
		{Name: "sport", Off: 10, Size: 2}, {Name: "nexthdr", Off: 12, Size: 1}, {Name: "flags", Off: 13, Size: 1},
	}},
	{"ct_entry", sizeCTEntry, []Field{
		{Name: "nat_addr", Off: 0, Size: 16}, {Name: "reserved0", Off: 0, Size: 8}, {Name: "backend_id", Off: 8, Size: 8},
		{Name: "packets", Off: 16, Size: 8}, {Name: "bytes", Off: 24, Size: 8}, {Name: "lifetime", Off: 32, Size: 4},
		{Name: "rx_closing", Off: ctFlagsOff, Bit: 0, Bits: 1}, {Name: "tx_closing", Off: ctFlagsOff, Bit: 1, Bits: 1},
		{Name: "need_dsr_info", Off: ctFlagsOff, Bit: 2, Bits: 1}, {Name: "lb_loopback", Off: ctFlagsOff, Bit: 3, Bits: 1},
		{Name: "seen_non_syn", Off: ctFlagsOff, Bit: 4, Bits: 1}, {Name: "node_port", Off: ctFlagsOff, Bit: 5, Bits: 1},
		{Name: "proxy_redirect", Off: ctFlagsOff, Bit: 6, Bits: 1}, {Name: "dsr_internal", Off: ctFlagsOff, Bit: 7, Bits: 1},
		{Name: "from_l7lb", Off: ctFlagsOff, Bit: 8, Bits: 1}, {Name: "from_tunnel", Off: ctFlagsOff, Bit: 10, Bits: 1},
		{Name: "rev_nat_index", Off: 38, Size: 2}, {Name: "nat_port", Off: 40, Size: 2},
		{Name: "tx_flags_seen", Off: 42, Size: 1}, {Name: "rx_flags_seen", Off: 43, Size: 1},
		{Name: "src_sec_id", Off: 44, Size: 4}, {Name: "last_tx_report", Off: 48, Size: 4}, {Name: "last_rx_report", Off: 52, Size: 4},
	}},
	{"lb4_affinity_key", sizeAffinityKey4, []Field{
		{Name: "client_id", Off: 0, Size: 8}, {Name: "client_id.client_ip", Off: 0, Size: 4},
		{Name: "client_id.client_cookie", Off: 0, Size: 8}, {Name: "rev_nat_id", Off: 8, Size: 2},
		{Name: "netns_cookie", Off: 10, Bit: 0, Bits: 1}, {Name: "pad1", Off: 11, Size: 1}, {Name: "pad2", Off: 12, Size: 4},
	}},
	{"lb_affinity_val", sizeAffinityVal, []Field{
		{Name: "last_used", Off: 0, Size: 8}, {Name: "backend_id", Off: 8, Size: 4}, {Name: "pad", Off: 12, Size: 4},
	}},
	{"lb_affinity_match", sizeAffinityMatch, []Field{
		{Name: "backend_id", Off: 0, Size: 4}, {Name: "rev_nat_id", Off: 4, Size: 2}, {Name: "pad", Off: 6, Size: 2},
	}},
	{"endpoint_key", sizeEndpointKey, []Field{
		{Name: "ip4", Off: 0, Size: 4}, {Name: "ip6", Off: 0, Size: 16}, {Name: "family", Off: 16, Size: 1}, {Name: "key", Off: 17, Size: 1},
		{Name: "cluster_id", Off: 18, Size: 2},
	}},
	{"lb4_src_range_key", sizeSourceRangeKey4, []Field{
		{Name: "lpm_key.prefixlen", Off: 0, Size: 4}, {Name: "rev_nat_id", Off: 4, Size: 2}, {Name: "pad", Off: 6, Size: 2},
		{Name: "addr", Off: 8, Size: 4},
	}},
	{"ipcache_key", sizeIPCacheKey, []Field{
		{Name: "lpm_key.prefixlen", Off: 0, Size: 4}, {Name: "cluster_id", Off: 4, Size: 2}, {Name: "pad1", Off: 6, Size: 1},
		{Name: "family", Off: 7, Size: 1}, {Name: "ip4", Off: 8, Size: 4}, {Name: "ip6", Off: 8, Size: 16},
	}},
	{"remote_endpoint_info", sizeIPCacheInfo, []Field{
		{Name: "sec_identity", Off: 0, Size: 4}, {Name: "tunnel_endpoint", Off: 4, Size: 16}, {Name: "pad", Off: 20, Size: 2},
		{Name: "key", Off: 22, Size: 1}, {Name: "flag_skip_tunnel", Off: 23, Bit: 0, Bits: 1},
		{Name: "flag_has_tunnel_ep", Off: 23, Bit: 1, Bits: 1}, {Name: "flag_ipv6_tunnel_ep", Off: 23, Bit: 2, Bits: 1},
		{Name: "flag_remote_cluster", Off: 23, Bit: 3, Bits: 1},
	}},
}

// SockLayouts are the structs of bpf_sock's own map, checked against bpf_sock's BTF as Layouts are against
// bpf_host's.
var SockLayouts = []Layout{
	{"ipv4_revnat_tuple", sizeSockRevNATKey4, []Field{
		{Name: "cookie", Off: 0, Size: 8}, {Name: "address", Off: 8, Size: 4}, {Name: "port", Off: 12, Size: 2},
		{Name: "pad", Off: 14, Size: 2},
	}},
	{"ipv4_revnat_entry", sizeSockRevNAT4, []Field{
		{Name: "address", Off: 0, Size: 4}, {Name: "port", Off: 4, Size: 2}, {Name: "rev_nat_index", Off: 6, Size: 2},
	}},
}

// SockMapTypes is MapTypes for the maps only bpf_sock declares.
var SockMapTypes = map[string][2]string{
	MapSockRevNAT: {"ipv4_revnat_tuple", "ipv4_revnat_entry"},
}

// MapTypes says which C types key and value each map is declared with (checked against the object's BTF).
// "u16"/"u32"/"u8" are the kernel's __u16/__u32/__u8.
var MapTypes = map[string][2]string{
	MapServices:      {"lb4_key", "lb4_service"},
	MapBackends:      {"u32", "lb4_backend"},
	MapRevNAT:        {"u16", "lb4_reverse_nat"},
	MapAffinity:      {"lb4_affinity_key", "lb_affinity_val"},
	MapAffinityMatch: {"lb_affinity_match", "u8"},
	MapMaglev:        {"u16", "u32"}, // outer: value is the inner map (an ARRAY of one u32[LUT size])
	MapCT:            {"ipv4_ct_tuple", "ct_entry"},
	MapCTAny:         {"ipv4_ct_tuple", "ct_entry"},
	MapSourceRange:   {"lb4_src_range_key", "u8"},
	MapEndpoints:     {"endpoint_key", "endpoint_info"},
	MapIPCache:       {"ipcache_key", "remote_endpoint_info"},
}

// Hex is raw map bytes, shown as hex in JSON (the wide view prints what the map holds).
type Hex []byte

func (h Hex) String() string { return hex.EncodeToString(h) }

// MarshalJSON writes the bytes as a hex string.
func (h Hex) MarshalJSON() ([]byte, error) { return []byte(`"` + hex.EncodeToString(h) + `"`), nil }

// UnmarshalJSON reads a hex string.
func (h *Hex) UnmarshalJSON(b []byte) error {
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return fmt.Errorf("hex bytes: want a string, got %s", b)
	}
	d, err := hex.DecodeString(string(b[1 : len(b)-1]))
	*h = d
	return err
}

// Raw keeps an entry's key and value bytes as read from the map.
type Raw struct {
	Key   Hex `json:"key"`
	Value Hex `json:"value,omitempty"`
}

func wantLen(what string, b []byte, n int) error {
	if len(b) != n {
		return fmt.Errorf("%s: %d bytes, want %d", what, len(b), n)
	}
	return nil
}

func addr4(b []byte) netip.Addr { return netip.AddrFrom4([4]byte(b[:4])) }

func put4(b []byte, a netip.Addr) {
	if a.Is4() {
		v := a.As4()
		copy(b, v[:])
	}
}

// ntohs converts a __be16 that the C holds in a host-order integer (the l7 proxy port) to its value.
func ntohs(v uint16) uint16 {
	var b [2]byte
	host.PutUint16(b[:], v)
	return be.Uint16(b[:])
}

// ServiceKey is struct lb4_key: a frontend (slot 0) or one of its backend slots (1..count+qcount).
type ServiceKey struct {
	Address netip.Addr `json:"address"` // net
	Port    uint16     `json:"port"`    // dport, net
	Slot    uint16     `json:"slot"`    // backend_slot, host
	Proto   uint8      `json:"proto"`   // 0 = ANY: with port 0 the "wildcard" entry that drops unknown ports
	Scope   uint8      `json:"scope"`   // 0 external, 1 internal (the "/i" frontends of two-scope services)
}

func (k ServiceKey) MarshalBinary() ([]byte, error) {
	b := make([]byte, sizeLB4Key)
	put4(b[0:4], k.Address)
	be.PutUint16(b[4:6], k.Port)
	host.PutUint16(b[6:8], k.Slot)
	b[8], b[9] = k.Proto, k.Scope
	return b, nil
}

func (k *ServiceKey) UnmarshalBinary(b []byte) error {
	if err := wantLen("lb4_key", b, sizeLB4Key); err != nil {
		return err
	}
	*k = ServiceKey{Address: addr4(b), Port: be.Uint16(b[4:6]), Slot: host.Uint16(b[6:8]), Proto: b[8], Scope: b[9]}
	return nil
}

// String is the key as cilium-dbg prints it: 172.18.0.2:30510/TCP (0), with "/i" for the internal scope.
func (k ServiceKey) String() string {
	s := fmt.Sprintf("%s/%s", netip.AddrPortFrom(k.Address, k.Port), ProtoName(k.Proto))
	if k.Scope == ScopeInternal {
		s += "/i"
	}
	return fmt.Sprintf("%s (%d)", s, k.Slot)
}

// Lookup scopes (LB_LOOKUP_SCOPE_*).
const (
	ScopeExternal = 0
	ScopeInternal = 1
)

// ServiceValue is struct lb4_service. For slot 0 BackendID is the union's affinity_timeout (low 24 bits) and
// per-service algorithm (high 8 bits), or the L7 proxy port; for slots > 0 it is the backend id.
type ServiceValue struct {
	BackendID uint32 `json:"backendId"` // host
	Count     uint16 `json:"count"`     // host
	RevNAT    uint16 `json:"revNat"`    // rev_nat_index: stored in network order, decoded here
	Flags     uint8  `json:"flags"`
	Flags2    uint8  `json:"flags2"`
	QCount    uint16 `json:"qcount"` // host
	FlagNames string `json:"flagNames"`
}

func (v ServiceValue) MarshalBinary() ([]byte, error) {
	b := make([]byte, sizeLB4Service)
	host.PutUint32(b[0:4], v.BackendID)
	host.PutUint16(b[4:6], v.Count)
	be.PutUint16(b[6:8], v.RevNAT)
	b[8], b[9] = v.Flags, v.Flags2
	host.PutUint16(b[10:12], v.QCount)
	return b, nil
}

func (v *ServiceValue) UnmarshalBinary(b []byte) error {
	if err := wantLen("lb4_service", b, sizeLB4Service); err != nil {
		return err
	}
	*v = ServiceValue{BackendID: host.Uint32(b[0:4]), Count: host.Uint16(b[4:6]), RevNAT: be.Uint16(b[6:8]),
		Flags: b[8], Flags2: b[9], QCount: host.Uint16(b[10:12])}
	v.FlagNames = v.ServiceFlags().String()
	return nil
}

// ServiceFlags is flags | flags2<<8, as Cilium's Go side combines them.
func (v ServiceValue) ServiceFlags() ServiceFlags {
	return ServiceFlags(v.Flags) | ServiceFlags(v.Flags2)<<8
}

// AffinityTimeout is the sessionAffinity timeout in seconds (frontend entries).
func (v ServiceValue) AffinityTimeout() uint32 { return v.BackendID & 0x00ff_ffff }

// LBAlg is the per-service algorithm (LB_SELECTION_*), used when lb_selection_per_service is on.
func (v ServiceValue) LBAlg() uint8 { return uint8(v.BackendID >> 24) }

// L7ProxyPort is the proxy port of an L7 load-balancer frontend: a __be16 in the low bits of the host u32.
func (v ServiceValue) L7ProxyPort() uint16 { return ntohs(uint16(v.BackendID)) }

// BackendKey is the u32 backend id (host order) of cilium_lb4_backends_v3.
type BackendKey struct {
	ID uint32 `json:"id"`
}

func (k BackendKey) MarshalBinary() ([]byte, error) {
	b := make([]byte, 4)
	host.PutUint32(b, k.ID)
	return b, nil
}

func (k *BackendKey) UnmarshalBinary(b []byte) error {
	if err := wantLen("backend id", b, 4); err != nil {
		return err
	}
	k.ID = host.Uint32(b)
	return nil
}

// Backend states (lb4_backend.flags).
const (
	BackendActive      = 0
	BackendTerminating = 1
	BackendQuarantined = 2
	BackendMaintenance = 3
)

// BackendValue is struct lb4_backend.
type BackendValue struct {
	Address   netip.Addr `json:"address"`   // net
	Port      uint16     `json:"port"`      // net
	Proto     uint8      `json:"proto"`     // L4 protocol
	Flags     uint8      `json:"flags"`     // state: 0 active, 1 terminating, 2 quarantined, 3 maintenance
	ClusterID uint16     `json:"clusterId"` // host
	Zone      uint8      `json:"zone"`
}

func (v BackendValue) MarshalBinary() ([]byte, error) {
	b := make([]byte, sizeLB4Backend)
	put4(b[0:4], v.Address)
	be.PutUint16(b[4:6], v.Port)
	b[6], b[7] = v.Proto, v.Flags
	host.PutUint16(b[8:10], v.ClusterID)
	b[10] = v.Zone
	return b, nil
}

func (v *BackendValue) UnmarshalBinary(b []byte) error {
	if err := wantLen("lb4_backend", b, sizeLB4Backend); err != nil {
		return err
	}
	*v = BackendValue{Address: addr4(b), Port: be.Uint16(b[4:6]), Proto: b[6], Flags: b[7],
		ClusterID: host.Uint16(b[8:10]), Zone: b[10]}
	return nil
}

// StateName names a backend state as Cilium does.
func (v BackendValue) StateName() string {
	switch v.Flags {
	case BackendActive:
		return "active"
	case BackendTerminating:
		return "terminating"
	case BackendQuarantined:
		return "quarantined"
	case BackendMaintenance:
		return "maintenance"
	}
	return fmt.Sprintf("state %d", v.Flags)
}

// RevNATKey is the u16 rev-NAT id, stored in network order (as rev_nat_index everywhere).
type RevNATKey struct {
	ID uint16 `json:"id"`
}

func (k RevNATKey) MarshalBinary() ([]byte, error) {
	b := make([]byte, 2)
	be.PutUint16(b, k.ID)
	return b, nil
}

func (k *RevNATKey) UnmarshalBinary(b []byte) error {
	if err := wantLen("rev-NAT id", b, 2); err != nil {
		return err
	}
	k.ID = be.Uint16(b)
	return nil
}

// RevNATValue is struct lb4_reverse_nat (packed): the frontend a reply is rewritten back to.
type RevNATValue struct {
	Address netip.Addr `json:"address"` // net
	Port    uint16     `json:"port"`    // net
}

func (v RevNATValue) MarshalBinary() ([]byte, error) {
	b := make([]byte, sizeLB4RevNAT)
	put4(b[0:4], v.Address)
	be.PutUint16(b[4:6], v.Port)
	return b, nil
}

func (v *RevNATValue) UnmarshalBinary(b []byte) error {
	if err := wantLen("lb4_reverse_nat", b, sizeLB4RevNAT); err != nil {
		return err
	}
	*v = RevNATValue{Address: addr4(b), Port: be.Uint16(b[4:6])}
	return nil
}

// AffinityKey is struct lb4_affinity_key (packed). The datapath's NodePort path keys by client address
// (netns_cookie 0, address in the first 4 bytes of the 8-byte union); the socket LB keys by netns cookie.
type AffinityKey struct {
	ClientIP    netip.Addr `json:"clientIP,omitzero"` // net; when NetNSCookie is false
	Cookie      uint64     `json:"cookie,omitempty"`  // host; when NetNSCookie is true
	RevNAT      uint16     `json:"revNat"`            // net
	NetNSCookie bool       `json:"netnsCookie"`
}

func (k AffinityKey) MarshalBinary() ([]byte, error) {
	b := make([]byte, sizeAffinityKey4)
	if k.NetNSCookie {
		host.PutUint64(b[0:8], k.Cookie)
		b[10] = 1
	} else {
		put4(b[0:4], k.ClientIP)
	}
	be.PutUint16(b[8:10], k.RevNAT)
	return b, nil
}

func (k *AffinityKey) UnmarshalBinary(b []byte) error {
	if err := wantLen("lb4_affinity_key", b, sizeAffinityKey4); err != nil {
		return err
	}
	*k = AffinityKey{RevNAT: be.Uint16(b[8:10]), NetNSCookie: b[10]&1 != 0}
	if k.NetNSCookie {
		k.Cookie = host.Uint64(b[0:8])
	} else {
		k.ClientIP = addr4(b)
	}
	return nil
}

// AffinityValue is struct lb_affinity_val (packed). LastUsed is in bpf_mono_now() units (seconds since boot,
// or jiffies>>8 when enable_jiffies is set).
type AffinityValue struct {
	LastUsed  uint64 `json:"lastUsed"`  // host
	BackendID uint32 `json:"backendId"` // host
}

func (v AffinityValue) MarshalBinary() ([]byte, error) {
	b := make([]byte, sizeAffinityVal)
	host.PutUint64(b[0:8], v.LastUsed)
	host.PutUint32(b[8:12], v.BackendID)
	return b, nil
}

func (v *AffinityValue) UnmarshalBinary(b []byte) error {
	if err := wantLen("lb_affinity_val", b, sizeAffinityVal); err != nil {
		return err
	}
	*v = AffinityValue{LastUsed: host.Uint64(b[0:8]), BackendID: host.Uint32(b[8:12])}
	return nil
}

// AffinityMatchKey is struct lb_affinity_match: the agent's list of backends still valid for a service; an
// affinity entry whose backend is not listed is deleted by the datapath.
type AffinityMatchKey struct {
	BackendID uint32 `json:"backendId"` // host
	RevNAT    uint16 `json:"revNat"`    // net
}

func (k AffinityMatchKey) MarshalBinary() ([]byte, error) {
	b := make([]byte, sizeAffinityMatch)
	host.PutUint32(b[0:4], k.BackendID)
	be.PutUint16(b[4:6], k.RevNAT)
	return b, nil
}

func (k *AffinityMatchKey) UnmarshalBinary(b []byte) error {
	if err := wantLen("lb_affinity_match", b, sizeAffinityMatch); err != nil {
		return err
	}
	*k = AffinityMatchKey{BackendID: host.Uint32(b[0:4]), RevNAT: be.Uint16(b[4:6])}
	return nil
}

// Conntrack tuple flags (TUPLE_F_*).
const (
	TupleOut     = 0
	TupleIn      = 1
	TupleRelated = 2
	TupleService = 4
)

// CTTuple is struct ipv4_ct_tuple (packed). The C keeps the ports "reversed": after lb4_extract_tuple, Dport
// holds the packet's source port and Sport its destination port (see ipv4_ct_tuple_swap_ports).
type CTTuple struct {
	Daddr   netip.Addr `json:"daddr"` // net
	Saddr   netip.Addr `json:"saddr"` // net
	Dport   uint16     `json:"dport"` // net
	Sport   uint16     `json:"sport"` // net
	Nexthdr uint8      `json:"nexthdr"`
	Flags   uint8      `json:"flags"`
}

func (k CTTuple) MarshalBinary() ([]byte, error) {
	b := make([]byte, sizeCTTuple4)
	put4(b[0:4], k.Daddr)
	put4(b[4:8], k.Saddr)
	be.PutUint16(b[8:10], k.Dport)
	be.PutUint16(b[10:12], k.Sport)
	b[12], b[13] = k.Nexthdr, k.Flags
	return b, nil
}

func (k *CTTuple) UnmarshalBinary(b []byte) error {
	if err := wantLen("ipv4_ct_tuple", b, sizeCTTuple4); err != nil {
		return err
	}
	*k = CTTuple{Daddr: addr4(b), Saddr: addr4(b[4:]), Dport: be.Uint16(b[8:10]), Sport: be.Uint16(b[10:12]),
		Nexthdr: b[12], Flags: b[13]}
	return nil
}

// String is the tuple as `cilium-dbg bpf ct list global` prints it (CtKey4Global.Dump with reverse=true).
func (k CTTuple) String() string {
	p := ProtoName(k.Nexthdr)
	var s string
	switch {
	case k.Flags&TupleService != 0:
		s = fmt.Sprintf("%s SVC %s:%d -> %s:%d ", p, k.Saddr, k.Dport, k.Daddr, k.Sport)
	case k.Flags&TupleIn != 0:
		s = fmt.Sprintf("%s IN %s:%d -> %s:%d ", p, k.Daddr, k.Sport, k.Saddr, k.Dport)
	default:
		s = fmt.Sprintf("%s OUT %s:%d -> %s:%d ", p, k.Daddr, k.Sport, k.Saddr, k.Dport)
	}
	if k.Flags&TupleRelated != 0 {
		s += "related "
	}
	return s
}

// ct_entry bit fields (the u16 at offset 36, little-endian bit order).
const (
	CTRxClosing     = 1 << 0
	CTTxClosing     = 1 << 1
	CTNeedDSRInfo   = 1 << 2
	CTLBLoopback    = 1 << 3
	CTSeenNonSyn    = 1 << 4
	CTNodePort      = 1 << 5
	CTProxyRedirect = 1 << 6
	CTDSRInternal   = 1 << 7
	CTFromL7LB      = 1 << 8
	CTFromTunnel    = 1 << 10
)

var ctFlagNames = []struct {
	bit  uint16
	name string
}{
	{CTRxClosing, "rx_closing"}, {CTTxClosing, "tx_closing"}, {CTNeedDSRInfo, "need_dsr_info"},
	{CTLBLoopback, "lb_loopback"}, {CTSeenNonSyn, "seen_non_syn"}, {CTNodePort, "node_port"},
	{CTProxyRedirect, "proxy_redirect"}, {CTDSRInternal, "dsr_internal"}, {CTFromL7LB, "from_l7lb"},
	{CTFromTunnel, "from_tunnel"},
}

// CTEntry is struct ct_entry as of Cilium 1.19+: offsets 0-15 are a union of nat_addr (CT_EGRESS entries)
// and {reserved0, backend_id} (CT_SERVICE entries); offset 40 is nat_port (1.17/1.18 had other fields there).
type CTEntry struct {
	NatAddr      netip.Addr `json:"natAddr,omitzero"` // IPv4 in the first 4 bytes of the v6addr, for egress entries
	BackendID    uint64     `json:"backendId"`        // host; CT_SERVICE entries
	Packets      uint64     `json:"packets"`
	Bytes        uint64     `json:"bytes"`
	Lifetime     uint32     `json:"lifetime"` // bpf_mono_now() units
	Flags        uint16     `json:"flags"`    // the bit fields, see CT* constants
	FlagNames    []string   `json:"flagNames,omitempty"`
	RevNAT       uint16     `json:"revNat"`  // rev_nat_index, net
	NatPort      uint16     `json:"natPort"` // net
	TxFlagsSeen  uint8      `json:"txFlagsSeen"`
	RxFlagsSeen  uint8      `json:"rxFlagsSeen"`
	SrcSecID     uint32     `json:"srcSecId"`
	LastTxReport uint32     `json:"lastTxReport"`
	LastRxReport uint32     `json:"lastRxReport"`
}

func (e CTEntry) MarshalBinary() ([]byte, error) {
	b := make([]byte, sizeCTEntry)
	if e.NatAddr.Is4() {
		put4(b[0:4], e.NatAddr)
	} else {
		host.PutUint64(b[8:16], e.BackendID)
	}
	host.PutUint64(b[16:24], e.Packets)
	host.PutUint64(b[24:32], e.Bytes)
	host.PutUint32(b[32:36], e.Lifetime)
	host.PutUint16(b[ctFlagsOff:ctFlagsOff+2], e.Flags)
	be.PutUint16(b[38:40], e.RevNAT)
	be.PutUint16(b[40:42], e.NatPort)
	b[42], b[43] = e.TxFlagsSeen, e.RxFlagsSeen
	host.PutUint32(b[44:48], e.SrcSecID)
	host.PutUint32(b[48:52], e.LastTxReport)
	host.PutUint32(b[52:56], e.LastRxReport)
	return b, nil
}

func (e *CTEntry) UnmarshalBinary(b []byte) error {
	if err := wantLen("ct_entry", b, sizeCTEntry); err != nil {
		return err
	}
	*e = CTEntry{BackendID: host.Uint64(b[8:16]), Packets: host.Uint64(b[16:24]), Bytes: host.Uint64(b[24:32]),
		Lifetime: host.Uint32(b[32:36]), Flags: host.Uint16(b[ctFlagsOff : ctFlagsOff+2]), RevNAT: be.Uint16(b[38:40]),
		NatPort: be.Uint16(b[40:42]), TxFlagsSeen: b[42], RxFlagsSeen: b[43], SrcSecID: host.Uint32(b[44:48]),
		LastTxReport: host.Uint32(b[48:52]), LastRxReport: host.Uint32(b[52:56])}
	// nat_addr shares bytes with backend_id: only egress (non-service) entries with a NAT port use it.
	if e.NatPort != 0 {
		e.NatAddr = addr4(b)
	}
	for _, f := range ctFlagNames {
		if e.Flags&f.bit != 0 {
			e.FlagNames = append(e.FlagNames, f.name)
		}
	}
	return nil
}

// Closing says the connection is closing in either direction (ct_entry_closing).
func (e CTEntry) Closing() bool { return e.Flags&(CTRxClosing|CTTxClosing) != 0 }

// String is the value as `cilium-dbg bpf ct list global` prints it (CtEntry.StringWithTimeDiff without the
// remaining time), with the 1.20 bit names.
func (e CTEntry) String() string {
	flags := fmt.Sprintf("Flags=%#04x [ ", e.Flags)
	for _, n := range e.FlagNames {
		flags += n + " "
	}
	flags += "]"
	return fmt.Sprintf("expires=%d Packets=%d Bytes=%d RxFlagsSeen=%#02x LastRxReport=%d TxFlagsSeen=%#02x LastTxReport=%d %s RevNAT=%d SourceSecurityID=%d BackendID=%d NatPort=%d",
		e.Lifetime, e.Packets, e.Bytes, e.RxFlagsSeen, e.LastRxReport, e.TxFlagsSeen, e.LastTxReport, flags,
		e.RevNAT, e.SrcSecID, e.BackendID, e.NatPort)
}

// MaglevKey is the outer Maglev map's u16 key: the service's rev-NAT id in network order (the C passes a
// u32 holding svc->rev_nat_index; the map reads its first two bytes).
type MaglevKey = RevNATKey

// EndpointKey is struct endpoint_key (packed), the key of cilium_lxc.
type EndpointKey struct {
	Address   netip.Addr `json:"address"`
	Family    uint8      `json:"family"` // 1 IPv4, 2 IPv6
	Key       uint8      `json:"key"`
	ClusterID uint16     `json:"clusterId"`
}

// Endpoint key families (ENDPOINT_KEY_*).
const (
	EndpointIPv4 = 1
	EndpointIPv6 = 2
)

func (k EndpointKey) MarshalBinary() ([]byte, error) {
	b := make([]byte, sizeEndpointKey)
	if k.Address.Is4() {
		put4(b[0:4], k.Address)
	} else if k.Address.Is6() {
		v := k.Address.As16()
		copy(b[0:16], v[:])
	}
	b[16], b[17] = k.Family, k.Key
	host.PutUint16(b[18:20], k.ClusterID)
	return b, nil
}

func (k *EndpointKey) UnmarshalBinary(b []byte) error {
	if err := wantLen("endpoint_key", b, sizeEndpointKey); err != nil {
		return err
	}
	*k = EndpointKey{Family: b[16], Key: b[17], ClusterID: host.Uint16(b[18:20])}
	if k.Family == EndpointIPv4 {
		k.Address = addr4(b)
	} else {
		k.Address = netip.AddrFrom16([16]byte(b[0:16]))
	}
	return nil
}

// EndpointInfo is the part of struct endpoint_info the walk shows.
type EndpointInfo struct {
	Ifindex uint32 `json:"ifindex"`
	LxcID   uint16 `json:"lxcId"`
	Flags   uint32 `json:"flags"` // ENDPOINT_F_HOST (1): the node itself
	SecID   uint32 `json:"secId"`
}

func (v *EndpointInfo) UnmarshalBinary(b []byte) error {
	if len(b) < 36 {
		return fmt.Errorf("endpoint_info: %d bytes, want at least 36", len(b))
	}
	*v = EndpointInfo{Ifindex: host.Uint32(b[0:4]), LxcID: host.Uint16(b[6:8]), Flags: host.Uint32(b[8:12]),
		SecID: host.Uint32(b[32:36])}
	return nil
}

// SourceRangeKey is struct lb4_src_range_key, an LPM key whose prefix covers rev_nat_id and pad (32 bits)
// and then the address.
type SourceRangeKey struct {
	PrefixLen uint32       `json:"prefixLen"` // host; includes the 32 bits of rev_nat_id+pad
	RevNAT    uint16       `json:"revNat"`    // net
	Prefix    netip.Prefix `json:"prefix"`
}

func (k SourceRangeKey) MarshalBinary() ([]byte, error) {
	b := make([]byte, sizeSourceRangeKey4)
	host.PutUint32(b[0:4], k.PrefixLen)
	be.PutUint16(b[4:6], k.RevNAT)
	put4(b[8:12], k.Prefix.Addr())
	return b, nil
}

func (k *SourceRangeKey) UnmarshalBinary(b []byte) error {
	if err := wantLen("lb4_src_range_key", b, sizeSourceRangeKey4); err != nil {
		return err
	}
	*k = SourceRangeKey{PrefixLen: host.Uint32(b[0:4]), RevNAT: be.Uint16(b[4:6])}
	bits := int(k.PrefixLen) - 32
	if bits < 0 || bits > 32 {
		return fmt.Errorf("lb4_src_range_key: prefix length %d", k.PrefixLen)
	}
	p, err := addr4(b[8:]).Prefix(bits)
	k.Prefix = p
	return err
}

// protoNames is Cilium's pkg/u8proto table.
var protoNames = map[uint8]string{0: "ANY", 1: "ICMP", 2: "IGMP", 4: "IPIP", 6: "TCP", 17: "UDP", 41: "IPv6", 47: "GRE",
	50: "ESP", 51: "AH", 58: "ICMPv6", 112: "VRRP", 132: "SCTP"}

// ProtoName names an L4 protocol as Cilium's u8proto does.
func ProtoName(p uint8) string {
	if n, ok := protoNames[p]; ok {
		return n
	}
	return fmt.Sprint(p)
}

// SockRevNATKey is struct ipv4_revnat_tuple, the key of cilium_lb4_reverse_sk: a socket (its cookie) and the
// backend the socket LB connected it to.
type SockRevNATKey struct {
	Cookie  uint64     `json:"cookie"`  // host order
	Address netip.Addr `json:"address"` // net
	Port    uint16     `json:"port"`    // net
}

func (k SockRevNATKey) MarshalBinary() ([]byte, error) {
	b := make([]byte, sizeSockRevNATKey4)
	host.PutUint64(b[0:8], k.Cookie)
	put4(b[8:12], k.Address)
	be.PutUint16(b[12:14], k.Port)
	return b, nil
}

func (k *SockRevNATKey) UnmarshalBinary(b []byte) error {
	if err := wantLen("ipv4_revnat_tuple", b, sizeSockRevNATKey4); err != nil {
		return err
	}
	*k = SockRevNATKey{Cookie: host.Uint64(b[0:8]), Address: addr4(b[8:12]), Port: be.Uint16(b[12:14])}
	return nil
}

// SockRevNATValue is struct ipv4_revnat_entry: the frontend the socket's connect() asked for.
type SockRevNATValue struct {
	Address netip.Addr `json:"address"` // net
	Port    uint16     `json:"port"`    // net
	RevNAT  uint16     `json:"revNat"`  // net, as the service's rev_nat_index
}

func (v SockRevNATValue) MarshalBinary() ([]byte, error) {
	b := make([]byte, sizeSockRevNAT4)
	put4(b[0:4], v.Address)
	be.PutUint16(b[4:6], v.Port)
	be.PutUint16(b[6:8], v.RevNAT)
	return b, nil
}

func (v *SockRevNATValue) UnmarshalBinary(b []byte) error {
	if err := wantLen("ipv4_revnat_entry", b, sizeSockRevNAT4); err != nil {
		return err
	}
	*v = SockRevNATValue{Address: addr4(b[0:4]), Port: be.Uint16(b[4:6]), RevNAT: be.Uint16(b[6:8])}
	return nil
}

// IPCacheKey is struct ipcache_key (packed), the LPM key of cilium_ipcache_v2: the prefix length counts the 32
// bits of cluster_id, pad1 and family before the address's own.
type IPCacheKey struct {
	PrefixLen uint32     `json:"prefixLen"` // host
	ClusterID uint16     `json:"clusterId"` // host
	Family    uint8      `json:"family"`    // ENDPOINT_KEY_IPV4 1, IPV6 2
	Address   netip.Addr `json:"address"`
}

// ipcacheStaticPrefix is IPCACHE_STATIC_PREFIX: the key bits before the address.
const ipcacheStaticPrefix = 32

// Prefix is the key's address prefix.
func (k IPCacheKey) Prefix() netip.Prefix {
	bits := int(k.PrefixLen) - ipcacheStaticPrefix
	if bits < 0 {
		bits = 0
	}
	return netip.PrefixFrom(k.Address, bits)
}

func (k IPCacheKey) MarshalBinary() ([]byte, error) {
	b := make([]byte, sizeIPCacheKey)
	host.PutUint32(b[0:4], k.PrefixLen)
	host.PutUint16(b[4:6], k.ClusterID)
	b[7] = k.Family
	if k.Address.Is4() {
		put4(b[8:12], k.Address)
	} else if k.Address.Is6() {
		v := k.Address.As16()
		copy(b[8:24], v[:])
	}
	return b, nil
}

func (k *IPCacheKey) UnmarshalBinary(b []byte) error {
	if err := wantLen("ipcache_key", b, sizeIPCacheKey); err != nil {
		return err
	}
	*k = IPCacheKey{PrefixLen: host.Uint32(b[0:4]), ClusterID: host.Uint16(b[4:6]), Family: b[7]}
	if k.Family == EndpointIPv4 {
		k.Address = addr4(b[8:12])
	} else {
		k.Address = netip.AddrFrom16([16]byte(b[8:24]))
	}
	return nil
}

// RemoteEndpointInfo is struct remote_endpoint_info, the value of cilium_ipcache_v2.
type RemoteEndpointInfo struct {
	Identity uint32 `json:"identity"` // host
	// TunnelEndpoint is the node that holds the address (tunnel mode), when FlagHasTunnelEP is set.
	TunnelEndpoint netip.Addr `json:"tunnelEndpoint,omitzero"`
	Key            uint8      `json:"key"`
	Flags          uint8      `json:"flags"` // skip_tunnel 1, has_tunnel_ep 2, ipv6_tunnel_ep 4, remote_cluster 8
}

// The flag bits of remote_endpoint_info's last byte.
const (
	IPCacheFlagHasTunnelEP   = 1 << 1
	IPCacheFlagRemoteCluster = 1 << 3
)

func (v *RemoteEndpointInfo) UnmarshalBinary(b []byte) error {
	if err := wantLen("remote_endpoint_info", b, sizeIPCacheInfo); err != nil {
		return err
	}
	*v = RemoteEndpointInfo{Identity: host.Uint32(b[0:4]), Key: b[22], Flags: b[23]}
	if v.Flags&IPCacheFlagHasTunnelEP != 0 {
		v.TunnelEndpoint = addr4(b[4:8])
	}
	return nil
}

// Reserved security identities (bpf/lib/identity.h) the socket LB's wildcard lookup tests.
const (
	IdentityHost          = 1
	IdentityRemoteNode    = 6
	IdentityKubeAPIServer = 7
	identityScopeMask     = 0xFF000000
	identityScopeRemote   = 0x02000000
)

// identityIsRemoteNode is identity_is_remote_node.
func identityIsRemoteNode(id uint32) bool {
	return id == IdentityRemoteNode || id == IdentityKubeAPIServer || id&identityScopeMask == identityScopeRemote
}
