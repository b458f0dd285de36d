package ebpf

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
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

// LBMap is `cilium-dbg bpf lb list -o json`: each services-map key (its String, slot included) to its entry.
func LBMap(s *State) map[string][]string {
	out := map[string][]string{}
	for _, e := range s.Services {
		k := e.Key.String()
		out[k] = append(out[k], strings.TrimSpace(s.lbListEntry(e)))
	}
	return out
}

// ServiceListing is one row group of `cilium-dbg service list`: a frontend with its backends in slot order.
type ServiceListing struct {
	ID       uint16   `json:"id"`
	Frontend string   `json:"frontend"`
	Type     string   `json:"type"`
	Flags    string   `json:"flags"`
	Backends []string `json:"backends"`
}

// Services is `cilium-dbg service list` rebuilt from the maps, as the agent's realized state would print it:
// one frontend per master entry (slot 0; the id is its rev-NAT index, which Cilium gives each frontend), its
// type from the flags, and its backends in slot order with their state ("1 => 10.244.1.5:80/TCP (active)").
// An internal-scope frontend (a Service with two scopes) is listed with /i, as the map key prints it.
func Services(s *State) []ServiceListing {
	var out []ServiceListing
	for _, m := range sortedServices(s) {
		if m.Key.Slot != 0 {
			continue
		}
		k := m.Key
		fe := fmt.Sprintf("%s/%s", netip.AddrPortFrom(k.Address, k.Port), ProtoName(k.Proto))
		if k.Scope == ScopeInternal {
			fe += "/i"
		}
		l := ServiceListing{ID: m.Value.RevNAT, Frontend: fe, Type: m.Value.ServiceFlags().Type(), Flags: m.Value.ServiceFlags().String(), Backends: []string{}}
		for slot := uint16(1); slot <= m.Value.Count; slot++ {
			sk := k
			sk.Slot = slot
			e, ok := s.service(sk)
			if !ok {
				l.Backends = append(l.Backends, fmt.Sprintf("%d => slot missing", slot))
				continue
			}
			b, ok := s.backend(e.Value.BackendID)
			if !ok {
				l.Backends = append(l.Backends, fmt.Sprintf("%d => backend %d not found", slot, e.Value.BackendID))
				continue
			}
			l.Backends = append(l.Backends, fmt.Sprintf("%d => %s/%s (%s)", slot, netip.AddrPortFrom(b.Value.Address, b.Value.Port), ProtoName(b.Value.Proto), b.Value.StateName()))
		}
		out = append(out, l)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// ServiceList prints Services as `cilium-dbg service list` does (printServiceList: the same tabwriter, the
// first backend on the frontend's line, the others below it).
func ServiceList(s *State) string {
	var sb strings.Builder
	w := tabwriter.NewWriter(&sb, 5, 0, 3, ' ', 0)
	// No trailing cells (cilium-dbg's have them): their padding would run lines past the terminal.
	fmt.Fprintln(w, "ID\tFrontend\tService Type\tBackend")
	for _, l := range Services(s) {
		if len(l.Backends) == 0 {
			fmt.Fprintf(w, "%d\t%s\t%s\n", l.ID, l.Frontend, l.Type)
			continue
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\n", l.ID, l.Frontend, l.Type, l.Backends[0])
		for _, b := range l.Backends[1:] {
			fmt.Fprintf(w, "\t\t\t%s\n", b)
		}
	}
	w.Flush()
	return sb.String()
}

// CTList prints the conntrack entries as `cilium-dbg bpf ct list global` does (one line per entry: the tuple,
// then the entry), TCP's map first; entries not collected are counted at the end.
func CTList(s *State) string {
	var sb strings.Builder
	for _, r := range s.CT {
		sb.WriteString(r.String())
		sb.WriteByte('\n')
	}
	if s.CTOther > 0 {
		fmt.Fprintf(&sb, "(%d more entries of connections that no Service translated were not collected)\n", s.CTOther)
	}
	return sb.String()
}

// SockNATMap is `cilium-dbg bpf socknat list -o json`: each socket cookie to its "backend -> frontend" entries.
func SockNATMap(s *State) map[string][]string {
	out := map[string][]string{}
	for _, e := range s.SockRevNAT {
		c := strconv.FormatUint(e.Key.Cookie, 10)
		out[c] = append(out[c], sockNATEntry(e))
	}
	return out
}

// sockNATEntry is dumpReverseSKEntries' line, with the ports in host order: cilium-dbg v1.20.2 prints the
// network-order int16 it reads (port 80 shows as 20480), which would teach nothing.
func sockNATEntry(e SockRevNATEntry) string {
	return fmt.Sprintf("%s:%d -> %s:%d (revnat=%d)", e.Key.Address, e.Key.Port, e.Value.Address, e.Value.Port, e.Value.RevNAT)
}

// SockNATList prints cilium_lb4_reverse_sk as `cilium-dbg bpf socknat list` does (TablePrinter's layout),
// sorted by cookie.
func SockNATList(s *State) string {
	var sb strings.Builder
	w := tabwriter.NewWriter(&sb, 5, 0, 3, ' ', 0)
	fmt.Fprintf(w, "%s\t%s\n", "Socket Cookie", "Backend -> Frontend")
	rows := slices.Clone(s.SockRevNAT)
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Key.Cookie < rows[j].Key.Cookie })
	for _, e := range rows {
		fmt.Fprintf(w, "%d\t%s\n", e.Key.Cookie, sockNATEntry(e))
	}
	w.Flush()
	return sb.String()
}
