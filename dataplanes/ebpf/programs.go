package ebpf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"

	cebpf "github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
)

// configPrefix is how static_data.h names CONFIG() variables: __config_NAME in the .rodata.config section.
const configPrefix = "__config_"

// readPrograms lists the programs attached with tcx to every interface of this network namespace and reads
// their load-time configuration. Cilium 1.20 attaches bpf_host with tcx when the kernel has it (6.6+); legacy
// tc (cls_bpf) attachments are not listed.
func (s *State) readPrograms() error {
	ifaces, err := net.Interfaces()
	if err != nil {
		return err
	}
	seenMaps := map[uint32]bool{}
	var errs []error
	for _, ifc := range ifaces {
		var addrs []netip.Prefix
		if as, err := ifc.Addrs(); err == nil {
			for _, a := range as {
				if n, ok := a.(*net.IPNet); ok {
					if p, ok := netip.AddrFromSlice(n.IP); ok && p.Unmap().Is4() {
						ones, _ := n.Mask.Size()
						addrs = append(addrs, netip.PrefixFrom(p.Unmap(), ones))
					}
				}
			}
		}
		for _, dir := range []struct {
			name   string
			attach cebpf.AttachType
		}{{"ingress", cebpf.AttachTCXIngress}, {"egress", cebpf.AttachTCXEgress}} {
			res, err := link.QueryPrograms(link.QueryOptions{Target: ifc.Index, Attach: dir.attach})
			if err != nil {
				if errors.Is(err, cebpf.ErrNotSupported) {
					return fmt.Errorf("this kernel cannot list tcx programs: %w", err)
				}
				errs = append(errs, fmt.Errorf("%s %s: %w", ifc.Name, dir.name, err))
				continue
			}
			for _, ap := range res.Programs {
				p := Program{Interface: ifc.Name, Ifindex: ifc.Index, Addrs: addrs, Direction: dir.name, Attach: "tcx",
					ID: uint32(ap.ID)}
				if err := s.readProgram(&p, seenMaps); err != nil {
					errs = append(errs, fmt.Errorf("%s %s program %d: %w", ifc.Name, dir.name, ap.ID, err))
				}
				s.Programs = append(s.Programs, p)
			}
		}
	}
	sort.SliceStable(s.Configs, func(i, j int) bool { return s.Configs[i].MapID < s.Configs[j].MapID })
	errs = append(errs, s.readSockLinks(seenMaps))
	return errors.Join(errs...)
}

// sockAttach names the cgroup attach types of Cilium's socket LB as the trace shows them.
var sockAttach = map[cebpf.AttachType]string{
	cebpf.AttachCGroupInet4Connect:     "connect4",
	cebpf.AttachCGroupUDP4Sendmsg:      "sendmsg4",
	cebpf.AttachCGroupUDP4Recvmsg:      "recvmsg4",
	cebpf.AttachCgroupInet4GetPeername: "getpeername4",
	cebpf.AttachCGroupInet4PostBind:    "post_bind4",
	cebpf.AttachCGroupInet4Bind:        "bind4",
	cebpf.AttachCgroupInetSockRelease:  "sock_release",
}

// SockLinksDir is where Cilium pins the socket LB's cgroup links, relative to the maps' directory
// (/sys/fs/bpf/tc/globals -> /sys/fs/bpf/cilium/socketlb/links/cgroup).
func SockLinksDir(bpffsDir string) string {
	return filepath.Join(bpffsDir, "..", "..", "cilium", "socketlb", "links", "cgroup")
}

// readSockLinks lists the socket LB's programs from their pinned cgroup links (a cgroup cannot be named from
// inside a node, whose /sys `ip netns exec` remounts; the pins say which programs Cilium attached, and to which
// cgroup). No pins: no socket LB.
func (s *State) readSockLinks(seenMaps map[uint32]bool) error {
	dir := SockLinksDir(s.BPFFS)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		l, err := link.LoadPinnedLink(filepath.Join(dir, e.Name()), nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("link %s: %w", e.Name(), err))
			continue
		}
		info, err := l.Info()
		l.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("link %s: %w", e.Name(), err))
			continue
		}
		p := Program{Attach: "cgroup", ID: uint32(info.Program)}
		if c := info.Cgroup(); c != nil {
			p.Direction = sockAttach[cebpf.AttachType(c.AttachType)]
			if p.Direction == "" {
				p.Direction = fmt.Sprint(c.AttachType)
			}
			p.Interface = fmt.Sprintf("cgroup %d", c.CgroupId)
		}
		if err := s.readProgram(&p, seenMaps); err != nil {
			errs = append(errs, fmt.Errorf("%s program %d: %w", e.Name(), p.ID, err))
		}
		s.Programs = append(s.Programs, p)
	}
	return errors.Join(errs...)
}

// readProgram fills in the program's name and tag, its config map and its tail calls.
func (s *State) readProgram(p *Program, seenMaps map[uint32]bool) error {
	prog, err := cebpf.NewProgramFromID(cebpf.ProgramID(p.ID))
	if err != nil {
		return err
	}
	defer prog.Close()
	info, err := prog.Info()
	if err != nil {
		return err
	}
	p.Name, p.Tag = info.Name, info.Tag
	ids, _ := info.MapIDs()
	for _, id := range ids {
		m, err := cebpf.NewMapFromID(id)
		if err != nil {
			continue
		}
		mi, err := m.Info()
		if err != nil {
			m.Close()
			continue
		}
		switch {
		case mi.Type == cebpf.ProgramArray && strings.HasPrefix(mi.Name, "cilium_calls"):
			p.TailCalls = tailCalls(m, mi.MaxEntries)
		case mi.Type == cebpf.Array && mi.MaxEntries == 1:
			if seenMaps[uint32(id)] {
				if s.config(uint32(id)) != nil {
					p.ConfigMap = uint32(id)
				}
				break
			}
			seenMaps[uint32(id)] = true
			c, err := readConfig(m, mi)
			if err != nil {
				m.Close()
				return fmt.Errorf("map %d (%s): %w", id, mi.Name, err)
			}
			if c != nil {
				c.MapID = uint32(id)
				s.Configs = append(s.Configs, *c)
				p.ConfigMap = uint32(id)
			}
		}
		m.Close()
	}
	return nil
}

// tailCalls lists the populated slots of a tail-call map (from user space a lookup returns the program id).
func tailCalls(m *cebpf.Map, max uint32) []uint32 {
	var out []uint32
	for i := uint32(0); i < max; i++ {
		var id uint32
		if err := m.Lookup(i, &id); err == nil && id != 0 {
			out = append(out, i)
		}
	}
	return out
}

// readConfig decodes a global-data map whose BTF is a Datasec of __config_ variables; nil if it is another
// array (.rodata, .bss, ...).
func readConfig(m *cebpf.Map, mi *cebpf.MapInfo) (*Config, error) {
	btfID, ok := mi.BTFID()
	if !ok {
		return nil, nil
	}
	h, err := btf.NewHandleFromID(btfID)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	spec, err := h.Spec(nil)
	if err != nil {
		return nil, err
	}
	ds := configDatasec(spec, mi)
	if ds == nil {
		return nil, nil
	}
	var val []byte
	if err := m.Lookup(uint32(0), &val); err != nil {
		return nil, err
	}
	c := &Config{MapName: mi.Name}
	for _, vs := range ds.Vars {
		v, ok := vs.Type.(*btf.Var)
		if !ok || !strings.HasPrefix(v.Name, configPrefix) {
			continue
		}
		if int(vs.Offset+vs.Size) > len(val) {
			return nil, fmt.Errorf("%s at %d+%d beyond the %d-byte value", v.Name, vs.Offset, vs.Size, len(val))
		}
		raw := val[vs.Offset : vs.Offset+vs.Size]
		cv := ConfigVar{Name: strings.TrimPrefix(v.Name, configPrefix), Raw: append(Hex(nil), raw...), Type: typeName(v.Type)}
		// Integers and bools decode to Value; unions (MAC and IP addresses) keep only their raw bytes.
		if _, isInt := btf.UnderlyingType(v.Type).(*btf.Int); isInt {
			switch len(raw) {
			case 1:
				cv.Value = uint64(raw[0])
			case 2:
				cv.Value = uint64(host.Uint16(raw))
			case 4:
				cv.Value = uint64(host.Uint32(raw))
			case 8:
				cv.Value = host.Uint64(raw)
			}
		}
		c.Vars = append(c.Vars, cv)
	}
	if len(c.Vars) == 0 {
		return nil, nil
	}
	c.fill()
	return c, nil
}

// configDatasec finds the map's Datasec: the one named like the map (".rodata.config", possibly truncated to
// the kernel's 15 characters), else the only Datasec of the right size holding __config_ variables.
func configDatasec(spec *btf.Spec, mi *cebpf.MapInfo) *btf.Datasec {
	var found *btf.Datasec
	for t, err := range spec.All() {
		if err != nil {
			return nil
		}
		ds, ok := t.(*btf.Datasec)
		if !ok || ds.Size != mi.ValueSize {
			continue
		}
		hasConfig := false
		for _, vs := range ds.Vars {
			if v, ok := vs.Type.(*btf.Var); ok && strings.HasPrefix(v.Name, configPrefix) {
				hasConfig = true
				break
			}
		}
		if !hasConfig {
			continue
		}
		if mi.Name != "" && strings.HasPrefix(ds.Name, mi.Name) {
			return ds
		}
		found = ds
	}
	return found
}

// typeName is a variable's C type without qualifiers: "__u32", "bool", "union macaddr".
func typeName(t btf.Type) string {
	for {
		switch q := t.(type) {
		case *btf.Volatile:
			t = q.Type
			continue
		case *btf.Const:
			t = q.Type
			continue
		}
		break
	}
	switch v := t.(type) {
	case *btf.Union:
		return "union " + v.Name
	case *btf.Struct:
		return "struct " + v.Name
	}
	return t.TypeName()
}
