package ebpf

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	cebpf "github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/ebpf/datapath"
)

// Collect reads Cilium's maps: from o.BPFFS when given (a failure is then missing), else from Cilium's own place
// when it has them, as on a real Cilium node.
func (Engine) Collect(_ context.Context, o dataplanes.CollectOptions) (dataplanes.Part, error) {
	bpffs := o.BPFFS
	if bpffs == "" {
		if _, err := os.Stat(filepath.Join(DefaultBPFFS, MapServices)); err != nil {
			return dataplanes.Part{}, nil
		}
		bpffs = DefaultBPFFS
	}
	st, err := Collect(bpffs)
	if err != nil {
		return dataplanes.Part{}, fmt.Errorf("reading the Cilium maps: %v", err)
	}
	data, err := json.Marshal(st)
	return dataplanes.Part{Data: data}, err
}

// CheckBPFFS says, in one line, why dir cannot hold Cilium's pinned maps: not there, not on a bpf filesystem,
// or a kernel without one.
func CheckBPFFS(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		if !kernelHasBPFFS() {
			return fmt.Errorf("%s: %v, and this kernel has no bpf filesystem (no \"bpf\" in /proc/filesystems)", dir, err)
		}
		return fmt.Errorf("%s: %v: not a bpf filesystem directory holding Cilium's maps (is this an ebpf node? --bpffs)", dir, err)
	}
	if uint32(st.Type) != unix.BPF_FS_MAGIC {
		if !kernelHasBPFFS() {
			return fmt.Errorf("%s is not on a bpf filesystem, and this kernel has none (no \"bpf\" in /proc/filesystems)", dir)
		}
		return fmt.Errorf("%s is not on a bpf filesystem (statfs type %#x, want %#x): mount one (mount -t bpf bpf /sys/fs/bpf) or point --bpffs at Cilium's pinned maps", dir, uint32(st.Type), unix.BPF_FS_MAGIC)
	}
	return nil
}

func kernelHasBPFFS() bool {
	ok, err := datapath.KernelHasBPFFS()
	return ok || err != nil // cannot tell: do not claim the kernel lacks it
}

// Collect reads Cilium's load-balancing maps pinned in bpffsDir (DefaultBPFFS when empty) and the programs
// attached to this network namespace's interfaces. The caller runs it inside the node's network namespace.
// The services, backends and reverse-NAT maps must exist; the others are optional (listed in Missing).
func Collect(bpffsDir string) (*State, error) {
	if bpffsDir == "" {
		bpffsDir = DefaultBPFFS
	}
	if err := CheckBPFFS(bpffsDir); err != nil {
		return nil, err
	}
	s := &State{BPFFS: bpffsDir, Endian: endianName()}
	open := func(name string, required bool) (*cebpf.Map, error) {
		path := filepath.Join(bpffsDir, name)
		m, err := cebpf.LoadPinnedMap(path, nil)
		switch {
		case err == nil:
			return m, nil
		case errors.Is(err, os.ErrNotExist) && name == MapServices:
			return nil, fmt.Errorf("no Cilium maps at %s: is this an ebpf node? --bpffs", path)
		case errors.Is(err, os.ErrNotExist) && !required:
			s.Missing = append(s.Missing, name)
			return nil, nil
		}
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	type reader struct {
		name     string
		required bool
		read     func(m *cebpf.Map) error
	}
	ctOtherKept := 0 // the CT entries kept that do not matter to load-balancing, of both maps
	readers := []reader{
		{MapServices, true, s.readServices},
		{MapBackends, true, s.readBackends},
		{MapRevNAT, true, s.readRevNAT},
		{MapAffinity, false, s.readAffinity},
		{MapAffinityMatch, false, s.readAffinityMatch},
		{MapMaglev, false, s.readMaglev},
		{MapCT, false, func(m *cebpf.Map) error { return s.readCT(MapCT, m, &ctOtherKept) }},
		{MapCTAny, false, func(m *cebpf.Map) error { return s.readCT(MapCTAny, m, &ctOtherKept) }},
		{MapSourceRange, false, s.readSourceRanges},
		{MapEndpoints, false, s.readEndpoints},
		{MapSockRevNAT, false, s.readSockRevNAT},
		{MapIPCache, false, s.readIPCache},
	}
	for _, r := range readers {
		m, err := open(r.name, r.required)
		if err != nil {
			return nil, err
		}
		if m == nil {
			continue
		}
		err = r.read(m)
		m.Close()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", filepath.Join(bpffsDir, r.name), err)
		}
	}
	if bpffsDir == DefaultBPFFS {
		// A Cilium node's own paths: its agent's state directory goes with its bpf filesystem.
		nc, err := ReadNodeConfig(NodeConfigPath)
		switch {
		case err == nil:
			s.NodeConfig = nc
		case !errors.Is(err, os.ErrNotExist):
			s.Warnings = append(s.Warnings, err.Error())
		}
	}
	if err := s.readPrograms(); err != nil {
		s.Warnings = append(s.Warnings, "attached programs: "+err.Error())
	}
	s.MonoNow, s.MonoUnit = monoNow(s.Configs)
	s.sort()
	return s, nil
}

func endianName() string {
	if binary.NativeEndian.Uint16([]byte{1, 0}) == 1 {
		return "little"
	}
	return "big"
}

// dump calls fn for every entry with copies of the raw key and value: the iterator decodes into the same
// buffers again once they have the right length, so entries keeping k or v must not share them.
func dump(m *cebpf.Map, fn func(k, v []byte) error) error {
	var k, v []byte
	it := m.Iterate()
	for it.Next(&k, &v) {
		if err := fn(bytes.Clone(k), bytes.Clone(v)); err != nil {
			return err
		}
	}
	return it.Err()
}

func (s *State) readServices(m *cebpf.Map) error {
	return dump(m, func(k, v []byte) error {
		e := ServiceEntry{Raw: Raw{k, v}}
		if err := e.Key.UnmarshalBinary(k); err != nil {
			return err
		}
		if err := e.Value.UnmarshalBinary(v); err != nil {
			return err
		}
		s.Services = append(s.Services, e)
		return nil
	})
}

func (s *State) readBackends(m *cebpf.Map) error {
	return dump(m, func(k, v []byte) error {
		var key BackendKey
		e := BackendEntry{Raw: Raw{k, v}}
		if err := key.UnmarshalBinary(k); err != nil {
			return err
		}
		e.ID = key.ID
		if err := e.Value.UnmarshalBinary(v); err != nil {
			return err
		}
		s.Backends = append(s.Backends, e)
		return nil
	})
}

func (s *State) readRevNAT(m *cebpf.Map) error {
	return dump(m, func(k, v []byte) error {
		var key RevNATKey
		e := RevNATEntry{Raw: Raw{k, v}}
		if err := key.UnmarshalBinary(k); err != nil {
			return err
		}
		e.ID = key.ID
		if err := e.Value.UnmarshalBinary(v); err != nil {
			return err
		}
		s.RevNAT = append(s.RevNAT, e)
		return nil
	})
}

func (s *State) readAffinity(m *cebpf.Map) error {
	return dump(m, func(k, v []byte) error {
		e := AffinityEntry{Raw: Raw{k, v}}
		if err := e.Key.UnmarshalBinary(k); err != nil {
			return err
		}
		if err := e.Value.UnmarshalBinary(v); err != nil {
			return err
		}
		s.Affinity = append(s.Affinity, e)
		return nil
	})
}

func (s *State) readAffinityMatch(m *cebpf.Map) error {
	return dump(m, func(k, v []byte) error {
		e := AffinityMatchEntry{Raw: Raw{k, v}}
		if err := e.Key.UnmarshalBinary(k); err != nil {
			return err
		}
		s.AffinityMatch = append(s.AffinityMatch, e)
		return nil
	})
}

// readMaglev reads each service's table: the outer map's value, read from user space, is the inner map's id.
func (s *State) readMaglev(m *cebpf.Map) error {
	return dump(m, func(k, v []byte) error {
		var key MaglevKey
		if err := key.UnmarshalBinary(k); err != nil {
			return err
		}
		if len(v) != 4 {
			return fmt.Errorf("outer value: %d bytes, want an inner map id", len(v))
		}
		id := host.Uint32(v)
		inner, err := cebpf.NewMapFromID(cebpf.MapID(id))
		if err != nil {
			return fmt.Errorf("inner map %d of rev-NAT %d: %w", id, key.ID, err)
		}
		defer inner.Close()
		var lut []byte
		if err := inner.Lookup(uint32(0), &lut); err != nil {
			return fmt.Errorf("inner map %d of rev-NAT %d: %w", id, key.ID, err)
		}
		if s.MaglevLUTSize == 0 {
			s.MaglevLUTSize = len(lut) / 4
		} else if s.MaglevLUTSize != len(lut)/4 {
			s.Warnings = append(s.Warnings, fmt.Sprintf("Maglev tables of different sizes: %d and %d", s.MaglevLUTSize, len(lut)/4))
		}
		s.Maglev = append(s.Maglev, MaglevEntry{RevNAT: key.ID, InnerMap: id, LUT: lut, Raw: Raw{Key: k}})
		return nil
	})
}

// readCT keeps every entry that matters to load-balancing and up to CTKeepOther others (counted in kept).
func (s *State) readCT(name string, m *cebpf.Map, kept *int) error {
	return dump(m, func(k, v []byte) error {
		e := CTRow{Map: name, Raw: Raw{k, v}}
		if err := e.Key.UnmarshalBinary(k); err != nil {
			return err
		}
		if err := e.Value.UnmarshalBinary(v); err != nil {
			return err
		}
		lb := e.Key.Flags&TupleService != 0 || e.Value.Flags&CTNodePort != 0 || e.Value.RevNAT != 0
		if !lb {
			if *kept >= CTKeepOther {
				s.CTOther++
				return nil
			}
			*kept++
		}
		s.CT = append(s.CT, e)
		return nil
	})
}

func (s *State) readSockRevNAT(m *cebpf.Map) error {
	return dump(m, func(k, v []byte) error {
		e := SockRevNATEntry{Raw: Raw{k, v}}
		if err := e.Key.UnmarshalBinary(k); err != nil {
			return err
		}
		if err := e.Value.UnmarshalBinary(v); err != nil {
			return err
		}
		s.SockRevNAT = append(s.SockRevNAT, e)
		return nil
	})
}

func (s *State) readSourceRanges(m *cebpf.Map) error {
	return dump(m, func(k, v []byte) error {
		e := SourceRangeEntry{Raw: Raw{Key: k}}
		if err := e.Key.UnmarshalBinary(k); err != nil {
			return err
		}
		s.SourceRanges = append(s.SourceRanges, e)
		return nil
	})
}

// ipcacheKeep bounds the ipcache entries kept: a large cluster's map holds one per pod, node and CIDR.
const ipcacheKeep = 65536

func (s *State) readIPCache(m *cebpf.Map) error {
	return dump(m, func(k, v []byte) error {
		e := IPCacheEntry{Raw: Raw{k, v}}
		if err := e.Key.UnmarshalBinary(k); err != nil {
			return err
		}
		if e.Key.Family != EndpointIPv4 || len(s.IPCache) >= ipcacheKeep {
			return nil
		}
		if err := e.Value.UnmarshalBinary(v); err != nil {
			return err
		}
		s.IPCache = append(s.IPCache, e)
		return nil
	})
}

func (s *State) readEndpoints(m *cebpf.Map) error {
	return dump(m, func(k, v []byte) error {
		e := EndpointEntry{Raw: Raw{k, v}}
		if err := e.Key.UnmarshalBinary(k); err != nil {
			return err
		}
		if e.Key.Family != EndpointIPv4 {
			return nil
		}
		if err := e.Value.UnmarshalBinary(v); err != nil {
			return err
		}
		s.Endpoints = append(s.Endpoints, e)
		return nil
	})
}

// monoNow is bpf_mono_now() as the datapath computes it: ktime_get_ns()/1e9 (CLOCK_MONOTONIC), or
// jiffies64 >> 8 when the programs use jiffies (read from /proc/timer_list).
func monoNow(configs []Config) (uint64, string) {
	jiffies := false
	for _, c := range configs {
		jiffies = jiffies || c.EnableJiffies
	}
	if !jiffies {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			return 0, ""
		}
		return uint64(ts.Sec), "s"
	}
	f, err := os.Open("/proc/timer_list")
	if err != nil {
		return 0, ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "jiffies: "); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err == nil {
				return n >> 8, "jiffies>>8"
			}
		}
	}
	return 0, ""
}
