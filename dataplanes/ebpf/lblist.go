package ebpf

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"text/tabwriter"
)

// lbListEntry is the second column of `cilium-dbg bpf lb list` for one services-map entry, as dumpSVC in
// cilium-dbg/cmd/bpf_lb_list.go (v1.20.2) formats it.
func (s *State) lbListEntry(e ServiceEntry) string {
	if e.Key.Slot == 0 {
		flags := e.Value.ServiceFlags()
		extra := ""
		if flags&FlagL7LoadBalancer != 0 {
			extra = fmt.Sprintf("(L7LB Proxy Port: %d)", e.Value.L7ProxyPort())
		}
		// The trailing space when extra is empty is cilium-dbg's too.
		return fmt.Sprintf("%s:%d (%d) (%d) [%s] %s", "0.0.0.0", 0, e.Value.RevNAT, e.Key.Slot, flags, extra)
	}
	b, ok := s.backend(e.Value.BackendID)
	if !ok {
		return fmt.Sprintf("backend %d not found", e.Value.BackendID)
	}
	addr := b.Value.Address.String()
	if b.Value.ClusterID != 0 {
		addr += fmt.Sprintf("@%d", b.Value.ClusterID) // AddrCluster.String()
	}
	return fmt.Sprintf("%s:%d/%s (%d) (%d)", addr, b.Value.Port, ProtoName(b.Value.Proto), e.Value.RevNAT, e.Key.Slot)
}

// LBList prints what `cilium-dbg bpf lb list` prints for IPv4: one line per services-map entry, through the
// same tabwriter settings (TablePrinter in cilium-dbg/cmd/helpers.go). cilium-dbg prints in Go map order,
// which is random; LBList sorts by address, port, protocol, scope and slot so the output is stable.
func LBList(s *State) string {
	var sb strings.Builder
	w := tabwriter.NewWriter(&sb, 5, 0, 3, ' ', 0)
	fmt.Fprintf(w, "%s\t%s\n", "SERVICE ADDRESS", "BACKEND ADDRESS (REVNAT_ID) (SLOT)")
	for _, e := range sortedServices(s) {
		fmt.Fprintf(w, "%s\t%s\t\n", e.Key.String(), s.lbListEntry(e))
	}
	w.Flush()
	return sb.String()
}

// LBListWide is LBList with the raw bytes: the services-map key and value, and for backend slots the
// backends-map value (hex, as the map holds them: network-order addresses and ports, host-order counters).
func LBListWide(s *State) string {
	var sb strings.Builder
	w := tabwriter.NewWriter(&sb, 5, 0, 3, ' ', 0)
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t\n", "SERVICE ADDRESS", "BACKEND ADDRESS (REVNAT_ID) (SLOT)", "KEY", "VALUE", "BACKEND VALUE")
	for _, e := range sortedServices(s) {
		bv := ""
		if e.Key.Slot != 0 {
			if b, ok := s.backend(e.Value.BackendID); ok {
				bv = b.Raw.Value.String()
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t\n", e.Key.String(), strings.TrimSpace(s.lbListEntry(e)), e.Raw.Key, e.Raw.Value, bv)
	}
	w.Flush()
	return sb.String()
}

func sortedServices(s *State) []ServiceEntry {
	out := append([]ServiceEntry(nil), s.Services...)
	sort.SliceStable(out, func(i, j int) bool { return lessServiceKey(out[i].Key, out[j].Key) })
	return out
}

// frontendString is a frontend as the walk names it: 172.18.0.2:30510/TCP.
func frontendString(k ServiceKey) string {
	return fmt.Sprintf("%s/%s", netip.AddrPortFrom(k.Address, k.Port), ProtoName(k.Proto))
}

// EndpointMap is what `cilium-dbg bpf endpoint list -o json` prints: each key with its entries.
func EndpointMap(s *State) map[string][]string {
	out := map[string][]string{}
	for _, e := range s.Endpoints {
		k, v := endpointKeyString(e.Key), endpointInfoString(e)
		out[k] = append(out[k], v)
	}
	return out
}

// endpointKeyString is EndpointKey.String(): the address (with @cluster when set) and the key byte.
func endpointKeyString(k EndpointKey) string {
	if k.ClusterID != 0 {
		return fmt.Sprintf("%s@%d:%d", k.Address, k.ClusterID, k.Key)
	}
	return fmt.Sprintf("%s:%d", k.Address, k.Key)
}

// EndpointList prints what `cilium-dbg bpf endpoint list` prints: one line per cilium_lxc entry, the key as
// EndpointKey.String() (address:key) and the value as lxcmap's EndpointInfo.String() ("(localhost)" for the
// node's own addresses), through cilium-dbg's TablePrinter (sorted by key, as it sorts).
func EndpointList(s *State) string {
	var sb strings.Builder
	w := tabwriter.NewWriter(&sb, 5, 0, 3, ' ', 0)
	// No trailing cell (cilium-dbg's TablePrinter has one): its padding would run lines past the terminal.
	fmt.Fprintf(w, "%s\t%s\n", "IP ADDRESS", "LOCAL ENDPOINT INFO")
	rows := map[string]string{}
	var keys []string
	for _, e := range s.Endpoints {
		k := endpointKeyString(e.Key)
		keys = append(keys, k)
		rows[k] = endpointInfoString(e)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "%s\t%s\n", k, rows[k])
	}
	w.Flush()
	return sb.String()
}

// endpointInfoString is lxcmap's EndpointInfo.String(): the MACs are read from the value's bytes (mac_t at
// offsets 16 and 24), printed as mac.Uint64MAC prints them.
func endpointInfoString(e EndpointEntry) string {
	v := e.Value
	if v.Flags&EndpointFlagHost != 0 {
		return "(localhost)"
	}
	b := []byte(e.Raw.Value)
	mac := func(off int) string {
		if len(b) < off+6 {
			return "00:00:00:00:00:00"
		}
		return fmt.Sprintf("%02X:%02X:%02X:%02X:%02X:%02X", b[off], b[off+1], b[off+2], b[off+3], b[off+4], b[off+5])
	}
	u32 := func(off int) uint32 {
		if len(b) < off+4 {
			return 0
		}
		return host.Uint32(b[off : off+4])
	}
	return fmt.Sprintf("id=%-5d sec_id=%-5d flags=0x%04X ifindex=%-3d mac=%s nodemac=%s parent_ifindex=%-3d rt_info:%d",
		v.LxcID, v.SecID, v.Flags, v.Ifindex, mac(16), mac(24), u32(36), u32(12))
}
