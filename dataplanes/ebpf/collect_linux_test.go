package ebpf

import (
	"encoding"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	cebpf "github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

func TestCheckBPFFS(t *testing.T) {
	err := CheckBPFFS(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "is not on a bpf filesystem") || strings.Contains(err.Error(), "\n") {
		t.Errorf("a plain directory: %v", err)
	}
	err = CheckBPFFS(filepath.Join(t.TempDir(), "nope"))
	if err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("a missing directory: %v", err)
	}
}

// mountBPFFS mounts a private bpf filesystem for the test.
func mountBPFFS(t *testing.T) string {
	t.Helper()
	needRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("bpf", dir, "bpf", 0, ""); err != nil {
		t.Skipf("cannot mount a bpf filesystem: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// pinned creates a map pinned by name in dir and fills it with the codecs' encodings.
func pinned(t *testing.T, dir string, spec *cebpf.MapSpec, entries ...[2]encoding.BinaryMarshaler) *cebpf.Map {
	t.Helper()
	m, err := cebpf.NewMap(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if err := m.Pin(filepath.Join(dir, spec.Name)); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := m.Put(mustRaw(t, e[0]), mustRaw(t, e[1])); err != nil {
			t.Fatalf("%s: %v", spec.Name, err)
		}
	}
	return m
}

type u8 uint8

func (v u8) MarshalBinary() ([]byte, error) { return []byte{byte(v)}, nil }

type rawBytes []byte

func (b rawBytes) MarshalBinary() ([]byte, error) { return b, nil }

// inNetns runs f on a thread in a new network namespace (the thread is discarded afterwards).
func inNetns(t *testing.T, f func() error) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine, and its namespace with it
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- &skipError{err}
			return
		}
		errc <- f()
	}()
	err := <-errc
	var skip *skipError
	if errors.As(err, &skip) {
		t.Skipf("cannot create a network namespace: %v", skip.err)
	}
	return err
}

type skipError struct{ err error }

func (e *skipError) Error() string { return e.err.Error() }

// TestCollect pins maps of bpf_host's layouts in a private bpffs, attaches a program with .rodata.config
// constants and a cilium_calls map to lo in a fresh network namespace, and checks that Collect reads it all back:
// decoded entries, raw bytes, programs, config, tail calls, the Maglev table and its size.
func TestCollect(t *testing.T) {
	dir := mountBPFFS(t)
	obj := compileProbe(t, "config_probe")

	// An empty bpffs: the error names the map's path.
	if _, err := Collect(dir); err == nil || err.Error() != "no Cilium maps at "+filepath.Join(dir, MapServices)+": is this an ebpf node? --bpffs" {
		t.Errorf("empty bpffs: %v", err)
	}

	fe := ServiceKey{Address: nodeIP, Port: 30510, Proto: 6}
	feVal := ServiceValue{Count: 2, RevNAT: 7, Flags: uint8(FlagNodePort | FlagRoutable)}
	slot1, slot2 := fe, fe
	slot1.Slot, slot2.Slot = 1, 2
	hashSpec := func(name string, k, v uint32) *cebpf.MapSpec {
		return &cebpf.MapSpec{Name: name, Type: cebpf.Hash, KeySize: k, ValueSize: v, MaxEntries: 64}
	}
	pinned(t, dir, hashSpec(MapServices, 12, 12),
		[2]encoding.BinaryMarshaler{fe, feVal},
		[2]encoding.BinaryMarshaler{slot1, ServiceValue{BackendID: 1, RevNAT: 7}},
		[2]encoding.BinaryMarshaler{slot2, ServiceValue{BackendID: 2, RevNAT: 7}})
	b1 := BackendValue{Address: netip.MustParseAddr("10.244.1.5"), Port: 80, Proto: 6}
	b2 := BackendValue{Address: netip.MustParseAddr("10.244.2.6"), Port: 8080, Proto: 6, Flags: BackendTerminating}
	pinned(t, dir, hashSpec(MapBackends, 4, 12), [2]encoding.BinaryMarshaler{BackendKey{1}, b1}, [2]encoding.BinaryMarshaler{BackendKey{2}, b2})
	pinned(t, dir, hashSpec(MapRevNAT, 2, 6), [2]encoding.BinaryMarshaler{RevNATKey{7}, RevNATValue{Address: nodeIP, Port: 30510}})
	ak, av := AffinityKey{ClientIP: client, RevNAT: 7}, AffinityValue{LastUsed: 123, BackendID: 2}
	pinned(t, dir, &cebpf.MapSpec{Name: MapAffinity, Type: cebpf.LRUHash, KeySize: 16, ValueSize: 16, MaxEntries: 64},
		[2]encoding.BinaryMarshaler{ak, av})
	pinned(t, dir, hashSpec(MapAffinityMatch, 8, 1), [2]encoding.BinaryMarshaler{AffinityMatchKey{BackendID: 2, RevNAT: 7}, u8(0)})
	ct := CTTuple{Daddr: nodeIP, Saddr: client, Dport: 40000, Sport: 30510, Nexthdr: 6, Flags: TupleService}
	ctv := CTEntry{BackendID: 1, Lifetime: 99, Flags: CTSeenNonSyn, RevNAT: 7, TxFlagsSeen: 0x12}
	other := CTTuple{Daddr: netip.MustParseAddr("10.244.1.5"), Saddr: client, Dport: 1, Sport: 2, Nexthdr: 6, Flags: TupleIn}
	pinned(t, dir, &cebpf.MapSpec{Name: MapCT, Type: cebpf.LRUHash, KeySize: 14, ValueSize: 56, MaxEntries: 64},
		[2]encoding.BinaryMarshaler{ct, ctv}, [2]encoding.BinaryMarshaler{other, CTEntry{}})

	lut := []uint32{1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1}
	lutBytes := make(rawBytes, 4*len(lut))
	for i, id := range lut {
		host.PutUint32(lutBytes[4*i:], id)
	}
	innerSpec := &cebpf.MapSpec{Name: "cilium_maglev_inner", Type: cebpf.Array, KeySize: 4, ValueSize: uint32(len(lutBytes)), MaxEntries: 1}
	inner, err := cebpf.NewMap(innerSpec)
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	if err := inner.Put(uint32(0), []byte(lutBytes)); err != nil {
		t.Fatal(err)
	}
	outer := pinned(t, dir, &cebpf.MapSpec{Name: MapMaglev, Type: cebpf.HashOfMaps, KeySize: 2, ValueSize: 4, MaxEntries: 64, InnerMap: innerSpec})
	if err := outer.Put(mustRaw(t, MaglevKey{ID: 7}), inner); err != nil {
		t.Fatal(err)
	}

	// The program: cil_from_netdev with its constants set as a loader would.
	spec, err := cebpf.LoadCollectionSpec(obj)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]any{"hash_init4_seed": uint32(0x5a5aa5a5), "lb_default_alg": uint8(AlgMaglev),
		"nodeport_port_min": uint16(30000), "nodeport_port_max": uint16(32767), "interface_ifindex": uint32(1),
		"enable_no_service_endpoints_routable": true, "some_u64": uint64(1) << 40} {
		if err := spec.Variables[configPrefix+name].Set(v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	coll, err := cebpf.NewCollection(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer coll.Close()
	prog := coll.Programs["cil_from_netdev"]
	if err := coll.Maps["cilium_calls"].Put(uint32(callNoService), prog); err != nil {
		t.Fatal(err)
	}

	var s *State
	err = inNetns(t, func() error {
		l, err := link.AttachTCX(link.TCXOptions{Interface: 1, Program: prog, Attach: cebpf.AttachTCXIngress})
		if err != nil {
			return err
		}
		defer l.Close()
		s, err = Collect(dir)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	// Every entry's raw bytes are its own: re-encoding the decoded entry gives them back.
	for _, e := range s.Services {
		if k, v := mustRaw(t, e.Key), mustRaw(t, e.Value); k.String() != e.Raw.Key.String() || v.String() != e.Raw.Value.String() {
			t.Errorf("service %s: raw %s %s, encodes as %s %s", e.Key, e.Raw.Key, e.Raw.Value, k, v)
		}
	}
	for _, e := range s.Backends {
		if k, v := mustRaw(t, BackendKey{e.ID}), mustRaw(t, e.Value); k.String() != e.Raw.Key.String() || v.String() != e.Raw.Value.String() {
			t.Errorf("backend %d: raw %s %s, encodes as %s %s", e.ID, e.Raw.Key, e.Raw.Value, k, v)
		}
	}
	for _, e := range s.CT {
		if k, v := mustRaw(t, e.Key), mustRaw(t, e.Value); k.String() != e.Raw.Key.String() || v.String() != e.Raw.Value.String() {
			t.Errorf("ct %s: raw %s %s, encodes as %s %s", e.Key, e.Raw.Key, e.Raw.Value, k, v)
		}
	}

	// Entries, decoded and raw.
	if len(s.Services) != 3 || s.Services[0].Key != fe || s.Services[0].Value.Count != 2 || s.Services[0].Value.RevNAT != 7 ||
		s.Services[0].Value.FlagNames != "NodePort" || s.Services[2].Key.Slot != 2 || s.Services[2].Value.BackendID != 2 {
		t.Errorf("services: %+v", s.Services)
	}
	if got := s.Services[0].Raw.Key.String(); got != "ac120002772e000006000000" {
		t.Errorf("raw frontend key %s", got)
	}
	if len(s.Backends) != 2 || s.Backends[1].Value != b2 || s.Backends[1].Raw.Value.String() != "0af402061f90060100000000" {
		t.Errorf("backends: %+v", s.Backends)
	}
	if len(s.RevNAT) != 1 || s.RevNAT[0].ID != 7 || s.RevNAT[0].Raw.Key.String() != "0007" {
		t.Errorf("rev-NAT: %+v", s.RevNAT)
	}
	if len(s.Affinity) != 1 || s.Affinity[0].Key != ak || s.Affinity[0].Value != av || len(s.AffinityMatch) != 1 {
		t.Errorf("affinity: %+v %+v", s.Affinity, s.AffinityMatch)
	}
	// Both entries are kept (a connection's policy entry too, under CTKeepOther); the service entry decoded.
	svcCT := slices.IndexFunc(s.CT, func(r CTRow) bool { return r.Key == ct })
	if len(s.CT) != 2 || s.CTOther != 0 || svcCT < 0 || s.CT[svcCT].Value.BackendID != 1 ||
		!slices.Equal(s.CT[svcCT].Value.FlagNames, []string{"seen_non_syn"}) {
		t.Errorf("conntrack: %+v (other %d)", s.CT, s.CTOther)
	}
	if s.MaglevLUTSize != len(lut) || len(s.Maglev) != 1 || !slices.Equal(s.Maglev[0].Backends(s.byteOrder()), lut) {
		t.Errorf("maglev: size %d %+v", s.MaglevLUTSize, s.Maglev)
	}
	for _, m := range []string{MapCTAny, MapSourceRange, MapEndpoints} {
		if !slices.Contains(s.Missing, m) {
			t.Errorf("%s not listed as missing: %v", m, s.Missing)
		}
	}
	if s.MonoNow == 0 || s.MonoUnit != "s" || s.Endian != "little" {
		t.Errorf("clock %d %q, endian %q", s.MonoNow, s.MonoUnit, s.Endian)
	}

	// The program and its configuration.
	if len(s.Programs) != 1 {
		t.Fatalf("programs: %+v (warnings %q)", s.Programs, s.Warnings)
	}
	p := s.Programs[0]
	if p.Interface != "lo" || p.Hook() != "tcx ingress lo" || p.Name != "cil_from_netdev" || p.ConfigMap == 0 ||
		!slices.Equal(p.TailCalls, []uint32{callNoService}) {
		t.Errorf("program: %+v", p)
	}
	c := s.config(p.ConfigMap)
	if c == nil {
		t.Fatalf("no config %d: %+v", p.ConfigMap, s.Configs)
	}
	if c.HashInit4Seed != 0x5a5aa5a5 || c.LBDefaultAlg != AlgMaglev || c.NodePortMin != 30000 || c.NodePortMax != 32767 ||
		c.InterfaceIfindex != 1 || !c.EnableNoServiceEndpointsRoutable || c.LBSelectionPerService {
		t.Errorf("config: %+v", c)
	}
	if v, ok := c.Var("some_u64"); !ok || v != 1<<40 {
		t.Errorf("some_u64 = %d %v", v, ok)
	}

	// The snapshot form: JSON round trip, and a walk that uses what was read (the Maglev table and the seed).
	s2 := viaJSON(t, s)
	if !reflect.DeepEqual(s, s2) {
		t.Errorf("JSON round trip changed the state:\n%+v\n%+v", s, s2)
	}
	flow := trace.Flow{Src: client, Sport: 40001, Dst: nodeIP, Dport: 30510, Proto: "tcp"}
	paths, _, _ := Walk(s2, flow, nil)
	idx := expectedMaglevIndex(client, 40001, 30510, 6, 0x5a5aa5a5, len(lut))
	want := map[uint32]string{1: "10.244.1.5:80", 2: "10.244.2.6:8080"}[lut[idx]]
	if len(paths) != 1 || paths[0].Endpoint == nil || paths[0].Endpoint.Addr() != want {
		t.Errorf("walk of the collected state: %+v, want %s", paths, want)
	}
	// The established flow of the CT entry goes to its backend; the walk names the lo program's hook.
	flow.Sport = 40000
	paths, _, cte := Walk(s2, flow, nil)
	if len(paths) != 1 || paths[0].Endpoint.Addr() != "10.244.1.5:80" || cte == nil || paths[0].Hops[0].Hook != "tcx ingress lo" {
		t.Errorf("established flow: %+v %+v", paths, cte)
	}
	if _, err := os.Stat(filepath.Join(dir, MapServices)); err != nil {
		t.Error(err)
	}
}
