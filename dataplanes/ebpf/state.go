package ebpf

import (
	"encoding/binary"
	"net/netip"
	"sort"
)

// State is what the walk needs from a node running Cilium's datapath, decoded, with every entry's raw bytes
// (the wide view prints them). It is JSON-serializable and goes into the node snapshot: a saved State must
// trace exactly like the live node.
type State struct {
	BPFFS string `json:"bpffs"`
	// Endian is the collecting machine's byte order ("little" or "big"): the Maglev hash mixes network-order
	// bytes loaded into host integers, so the walk needs it even when it runs elsewhere.
	Endian string `json:"endian"`
	// MonoNow is bpf_mono_now() when the maps were read (seconds since boot, or jiffies>>8 when the datapath
	// uses jiffies); 0 when unknown. Affinity and conntrack timestamps are in the same unit.
	MonoNow  uint64 `json:"monoNow,omitempty"`
	MonoUnit string `json:"monoUnit,omitempty"`
	// Programs are the eBPF programs attached with tcx to the node's interfaces.
	Programs []Program `json:"programs,omitempty"`
	// Configs are the load-time constants of those programs (one per .rodata.config map).
	Configs []Config `json:"configs,omitempty"`
	// MaglevLUTSize is the number of entries per Maglev table (the inner map's value size / 4; the datapath
	// takes the hash modulo its compiled LB_MAGLEV_LUT_SIZE, which the agent sizes the same).
	MaglevLUTSize int `json:"maglevLUTSize,omitempty"`

	Services      []ServiceEntry       `json:"services"`
	Backends      []BackendEntry       `json:"backends"`
	RevNAT        []RevNATEntry        `json:"revNat"`
	Affinity      []AffinityEntry      `json:"affinity,omitempty"`
	AffinityMatch []AffinityMatchEntry `json:"affinityMatch,omitempty"`
	Maglev        []MaglevEntry        `json:"maglev,omitempty"`
	// CT holds the conntrack entries: every one that matters to load-balancing (service entries,
	// TUPLE_F_SERVICE; the NodePort entries of translated flows; entries with a rev-NAT index), and the others
	// (connections' policy entries) up to CTKeepOther of them. CTOther counts those not kept: the table holds up
	// to half a million entries.
	CT           []CTRow            `json:"ct,omitempty"`
	CTOther      int                `json:"ctOther,omitempty"`
	SourceRanges []SourceRangeEntry `json:"sourceRanges,omitempty"`
	Endpoints    []EndpointEntry    `json:"endpoints,omitempty"`
	// IPCache is cilium_ipcache_v2's IPv4 entries: each known prefix's security identity.
	IPCache []IPCacheEntry `json:"ipcache,omitempty"`
	// SockRevNAT is the socket LB's state: one entry per live socket it translated (cilium_lb4_reverse_sk).
	SockRevNAT []SockRevNATEntry `json:"sockRevNat,omitempty"`
	// NodeConfig is what the agent's node_config.h says about choices made when its programs were compiled (a
	// Cilium node's own record; nil where there is none, as on the netns lab's nodes).
	NodeConfig *NodeConfig `json:"nodeConfig,omitempty"`
	// Missing lists the optional maps that were not pinned (affinity and Maglev maps exist only when enabled).
	Missing  []string `json:"missing,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
}

// NodeConfig is the part of Cilium's node_config.h (the agent's state directory, globals/node_config.h) the walk
// needs: compile-time macros, which no program's load-time constants carry.
type NodeConfig struct {
	Path string `json:"path"`
	// SocketLB is the socket LB's coverage: SocketLBFull (every socket of the node's cgroup, pods' too:
	// ENABLE_SOCKET_LB_FULL), SocketLBHostOnly (the host network namespace's only: ENABLE_SOCKET_LB_HOST_ONLY,
	// socketLB.hostNamespaceOnly), or "" (no socket LB).
	SocketLB string `json:"socketLB,omitempty"`
	// TunnelMode is TUNNEL_MODE: pods on other nodes are reached through an overlay (VXLAN or Geneve).
	TunnelMode bool `json:"tunnelMode,omitempty"`
}

// The socket LB's coverages (NodeConfig.SocketLB).
const (
	SocketLBFull     = "full"
	SocketLBHostOnly = "host-only"
)

// socketLBForPods says whether the socket LB translates a pod's connect() (Cilium's default with kube-proxy
// replacement, where each node's cgroup root holds its pods): only a Cilium node's node_config.h says so; the
// netns lab's socket LB is built host-only.
func (s *State) socketLBForPods() bool {
	return s.NodeConfig != nil && s.NodeConfig.SocketLB == SocketLBFull && s.sockProgram() != nil
}

// Program is one program attached to an interface.
type Program struct {
	Interface string         `json:"interface"`
	Ifindex   int            `json:"ifindex"`
	Addrs     []netip.Prefix `json:"addrs,omitempty"` // the interface's IPv4 addresses
	Direction string         `json:"direction"`       // ingress | egress
	Attach    string         `json:"attach"`          // tcx
	Name      string         `json:"name"`            // cil_from_netdev, cil_to_netdev, ...
	ID        uint32         `json:"id"`
	Tag       string         `json:"tag,omitempty"`
	// ConfigMap is the id of the program's .rodata.config map (see State.Configs), 0 if none was found.
	ConfigMap uint32 `json:"configMap,omitempty"`
	// TailCalls are the populated slots of the program's cilium_calls map (CILIUM_CALL_*): which optional
	// code the datapath was compiled with (45 = CILIUM_CALL_IPV4_NO_SERVICE, the ICMP reply for a Service
	// without backends).
	TailCalls []uint32 `json:"tailCalls,omitempty"`
}

// Hook is the program's attach point as the trace shows it: "tcx ingress eth0", "cgroup connect4".
func (p Program) Hook() string {
	if p.Attach == "cgroup" {
		return "cgroup " + p.Direction
	}
	return p.Attach + " " + p.Direction + " " + p.Interface
}

// ServiceEntry is one cilium_lb4_services_v2 entry.
type ServiceEntry struct {
	Key   ServiceKey   `json:"key"`
	Value ServiceValue `json:"value"`
	Raw   Raw          `json:"raw"`
}

// BackendEntry is one cilium_lb4_backends_v3 entry.
type BackendEntry struct {
	ID    uint32       `json:"id"`
	Value BackendValue `json:"value"`
	Raw   Raw          `json:"raw"`
}

// RevNATEntry is one cilium_lb4_reverse_nat entry.
type RevNATEntry struct {
	ID    uint16      `json:"id"`
	Value RevNATValue `json:"value"`
	Raw   Raw         `json:"raw"`
}

// AffinityEntry is one cilium_lb4_affinity entry.
type AffinityEntry struct {
	Key   AffinityKey   `json:"key"`
	Value AffinityValue `json:"value"`
	Raw   Raw           `json:"raw"`
}

// AffinityMatchEntry is one cilium_lb_affinity_match key (the value is an unused u8).
type AffinityMatchEntry struct {
	Key AffinityMatchKey `json:"key"`
	Raw Raw              `json:"raw"`
}

// MaglevEntry is one service's Maglev lookup table from cilium_lb4_maglev.
type MaglevEntry struct {
	RevNAT uint16 `json:"revNat"`
	// InnerMap is the inner map's id when read (the outer map's value, as the kernel reports it).
	InnerMap uint32 `json:"innerMap,omitempty"`
	// LUT is the inner map's value as read: LUT-size backend ids, u32 in host order. JSON stores it as base64
	// (a table has 16381 or more entries); Backends decodes it.
	LUT []byte `json:"lut"`
	Raw Raw    `json:"raw"` // the outer key
}

// Backends decodes the table: LUT[i] is the backend id chosen when the hash modulo the size is i.
func (m MaglevEntry) Backends(order binary.ByteOrder) []uint32 {
	out := make([]uint32, len(m.LUT)/4)
	for i := range out {
		out[i] = order.Uint32(m.LUT[4*i:])
	}
	return out
}

// SockRevNATEntry is one cilium_lb4_reverse_sk entry.
type SockRevNATEntry struct {
	Key   SockRevNATKey   `json:"key"`
	Value SockRevNATValue `json:"value"`
	Raw   Raw             `json:"raw"`
}

// CTKeepOther is how many conntrack entries that do not matter to load-balancing a collection keeps.
const CTKeepOther = 4096

// CTRow is one conntrack entry.
type CTRow struct {
	Map   string  `json:"map"`
	Key   CTTuple `json:"key"`
	Value CTEntry `json:"value"`
	Raw   Raw     `json:"raw"`
}

// String is the entry as `cilium-dbg bpf ct list global` prints it.
func (r CTRow) String() string { return r.Key.String() + r.Value.String() }

// SourceRangeEntry is one cilium_lb4_source_range key.
type SourceRangeEntry struct {
	Key SourceRangeKey `json:"key"`
	Raw Raw            `json:"raw"`
}

// IPCacheEntry is one cilium_ipcache_v2 entry.
type IPCacheEntry struct {
	Key   IPCacheKey         `json:"key"`
	Value RemoteEndpointInfo `json:"value"`
	Raw   Raw                `json:"raw"`
}

// ipcache is lookup_ip4_remote_endpoint(addr, 0): the longest prefix of the local cluster holding addr; ok is
// false when the map was not read or holds none.
// isNodeAddress says whether a is one of the node's own addresses: an address of an interface a program is on,
// or one the ipcache gives the host identity.
func (s *State) isNodeAddress(a netip.Addr) bool {
	for _, p := range s.Programs {
		for _, pfx := range p.Addrs {
			if pfx.Addr() == a {
				return true
			}
		}
	}
	e, ok := s.ipcache(a)
	return ok && e.Key.PrefixLen == 32 && e.Value.Identity == IdentityHost
}

func (s *State) ipcache(a netip.Addr) (IPCacheEntry, bool) {
	best, found := IPCacheEntry{}, false
	for _, e := range s.IPCache {
		if e.Key.Family != EndpointIPv4 || e.Key.ClusterID != 0 || !e.Key.Prefix().Contains(a) {
			continue
		}
		if !found || e.Key.PrefixLen > best.Key.PrefixLen {
			best, found = e, true
		}
	}
	return best, found
}

// EndpointEntry is one cilium_lxc entry: an endpoint local to this node (pods, and the node's own addresses
// with ENDPOINT_F_HOST).
type EndpointEntry struct {
	Key   EndpointKey  `json:"key"`
	Value EndpointInfo `json:"value"`
	Raw   Raw          `json:"raw"`
}

// Config is a program's .rodata.config map: the datapath's load-time constants (CONFIG()/NODE_CONFIG
// variables), read from the loaded program rather than guessed. The typed fields are the ones the walk uses.
type Config struct {
	MapID   uint32      `json:"mapId"`
	MapName string      `json:"mapName"`
	Vars    []ConfigVar `json:"vars"`

	HashInit4Seed         uint32 `json:"hashInit4Seed"`
	LBDefaultAlg          uint8  `json:"lbDefaultAlg"`
	LBSelectionPerService bool   `json:"lbSelectionPerService"`
	NodePortMin           uint16 `json:"nodeportPortMin"`
	NodePortMax           uint16 `json:"nodeportPortMax"`
	InterfaceIfindex      uint32 `json:"interfaceIfindex"`
	// EnableNoServiceEndpointsRoutable decides what a Service without backends does (see the walk).
	EnableNoServiceEndpointsRoutable bool   `json:"enableNoServiceEndpointsRoutable"`
	EnableNodePortSourceLookup       bool   `json:"enableNodeportSourceLookup"`
	EnableJiffies                    bool   `json:"enableJiffies"`
	KernelHZ                         uint32 `json:"kernelHz"`
}

// ConfigVar is one variable of the config section, by its C name (without the __config_ prefix).
type ConfigVar struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Value uint64 `json:"value"` // integers and bools; 0 for other types
	Raw   Hex    `json:"raw"`
}

// Var returns a variable's integer value.
func (c *Config) Var(name string) (uint64, bool) {
	for _, v := range c.Vars {
		if v.Name == name {
			return v.Value, true
		}
	}
	return 0, false
}

// fill sets the typed fields from Vars.
func (c *Config) fill() {
	u := func(n string) uint64 { v, _ := c.Var(n); return v }
	c.HashInit4Seed = uint32(u("hash_init4_seed"))
	c.LBDefaultAlg = uint8(u("lb_default_alg"))
	c.LBSelectionPerService = u("lb_selection_per_service") != 0
	c.NodePortMin = uint16(u("nodeport_port_min"))
	c.NodePortMax = uint16(u("nodeport_port_max"))
	c.InterfaceIfindex = uint32(u("interface_ifindex"))
	c.EnableNoServiceEndpointsRoutable = u("enable_no_service_endpoints_routable") != 0
	c.EnableNodePortSourceLookup = u("enable_nodeport_source_lookup") != 0
	c.EnableJiffies = u("enable_jiffies") != 0
	c.KernelHZ = uint32(u("kernel_hz"))
}

// sort puts every table in a stable order, so that snapshots of the same node compare equal.
func (s *State) sort() {
	sort.Slice(s.Services, func(i, j int) bool { return lessServiceKey(s.Services[i].Key, s.Services[j].Key) })
	sort.Slice(s.Backends, func(i, j int) bool { return s.Backends[i].ID < s.Backends[j].ID })
	sort.Slice(s.RevNAT, func(i, j int) bool { return s.RevNAT[i].ID < s.RevNAT[j].ID })
	sort.Slice(s.Affinity, func(i, j int) bool { return s.Affinity[i].Raw.Key.String() < s.Affinity[j].Raw.Key.String() })
	sort.Slice(s.AffinityMatch, func(i, j int) bool {
		return s.AffinityMatch[i].Raw.Key.String() < s.AffinityMatch[j].Raw.Key.String()
	})
	sort.Slice(s.Maglev, func(i, j int) bool { return s.Maglev[i].RevNAT < s.Maglev[j].RevNAT })
	sort.Slice(s.CT, func(i, j int) bool {
		if s.CT[i].Map != s.CT[j].Map {
			return s.CT[i].Map < s.CT[j].Map
		}
		return s.CT[i].Raw.Key.String() < s.CT[j].Raw.Key.String()
	})
	sort.Slice(s.SourceRanges, func(i, j int) bool {
		return s.SourceRanges[i].Raw.Key.String() < s.SourceRanges[j].Raw.Key.String()
	})
	sort.Slice(s.Endpoints, func(i, j int) bool { return s.Endpoints[i].Raw.Key.String() < s.Endpoints[j].Raw.Key.String() })
	sort.Slice(s.SockRevNAT, func(i, j int) bool { return s.SockRevNAT[i].Raw.Key.String() < s.SockRevNAT[j].Raw.Key.String() })
	sort.Slice(s.IPCache, func(i, j int) bool { return s.IPCache[i].Raw.Key.String() < s.IPCache[j].Raw.Key.String() })
}

// lessServiceKey orders frontends by address, port, protocol, scope, then slot.
func lessServiceKey(a, b ServiceKey) bool {
	if c := a.Address.Compare(b.Address); c != 0 {
		return c < 0
	}
	if a.Port != b.Port {
		return a.Port < b.Port
	}
	if a.Proto != b.Proto {
		return a.Proto < b.Proto
	}
	if a.Scope != b.Scope {
		return a.Scope < b.Scope
	}
	return a.Slot < b.Slot
}

// Lookups, as the datapath does them: exact key matches on the decoded keys (the codecs are exact, so equal
// decoded keys are equal byte keys).

func (s *State) service(k ServiceKey) (ServiceEntry, bool) {
	for _, e := range s.Services {
		if e.Key == k {
			return e, true
		}
	}
	return ServiceEntry{}, false
}

func (s *State) backend(id uint32) (BackendEntry, bool) {
	for _, e := range s.Backends {
		if e.ID == id {
			return e, true
		}
	}
	return BackendEntry{}, false
}

func (s *State) revNAT(id uint16) (RevNATEntry, bool) {
	for _, e := range s.RevNAT {
		if e.ID == id {
			return e, true
		}
	}
	return RevNATEntry{}, false
}

func (s *State) ct(m string, k CTTuple) (CTRow, bool) {
	for _, e := range s.CT {
		if e.Map == m && e.Key == k {
			return e, true
		}
	}
	return CTRow{}, false
}

func (s *State) maglev(revNAT uint16) (MaglevEntry, bool) {
	for _, e := range s.Maglev {
		if e.RevNAT == revNAT {
			return e, true
		}
	}
	return MaglevEntry{}, false
}

func (s *State) endpoint(a netip.Addr) (EndpointEntry, bool) {
	for _, e := range s.Endpoints {
		if e.Key.Family == EndpointIPv4 && e.Key.Address == a && e.Key.Key == 0 && e.Key.ClusterID == 0 {
			return e, true
		}
	}
	return EndpointEntry{}, false
}

func (s *State) byteOrder() binary.ByteOrder {
	if s.Endian == "big" {
		return binary.BigEndian
	}
	return binary.LittleEndian
}

func (s *State) config(mapID uint32) *Config {
	for i := range s.Configs {
		if s.Configs[i].MapID == mapID {
			return &s.Configs[i]
		}
	}
	return nil
}
