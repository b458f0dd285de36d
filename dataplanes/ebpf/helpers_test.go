package ebpf

import (
	"encoding"
	"encoding/binary"
	"encoding/json"
	"net/netip"
	"testing"
)

// The test node: 172.18.0.2 on eth0, its cil_from_netdev reading config map 5.
var (
	nodeIP = netip.MustParseAddr("172.18.0.2")
	client = netip.MustParseAddr("172.18.0.100")
)

func mustRaw(t testing.TB, m encoding.BinaryMarshaler) Hex {
	t.Helper()
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newTestState(t testing.TB) *State {
	return &State{
		Endian: "little", MonoNow: 10_000, MonoUnit: "s",
		Programs: []Program{
			{Interface: "eth0", Ifindex: 2, Addrs: []netip.Prefix{netip.MustParsePrefix("172.18.0.2/16")}, Direction: "ingress",
				Attach: "tcx", Name: "cil_from_netdev", ID: 10, ConfigMap: 5, TailCalls: []uint32{1, 15, 45}},
			{Interface: "eth0", Ifindex: 2, Direction: "egress", Attach: "tcx", Name: "cil_to_netdev", ID: 11, ConfigMap: 5},
		},
		Configs: []Config{{MapID: 5, MapName: ".rodata.config", HashInit4Seed: 0x5a5aa5a5, LBDefaultAlg: AlgRandom,
			NodePortMin: 30000, NodePortMax: 32767, InterfaceIfindex: 2, EnableNoServiceEndpointsRoutable: true}},
	}
}

// addService adds a frontend (slot 0) and its backend slots; backends are ids into s.Backends.
func addService(t testing.TB, s *State, fe netip.AddrPort, proto uint8, revNAT uint16, flags ServiceFlags, backends ...uint32) ServiceKey {
	t.Helper()
	k := ServiceKey{Address: fe.Addr(), Port: fe.Port(), Proto: proto}
	v := ServiceValue{Count: uint16(len(backends)), RevNAT: revNAT, Flags: uint8(flags), Flags2: uint8(flags >> 8)}
	v.FlagNames = v.ServiceFlags().String()
	s.Services = append(s.Services, ServiceEntry{Key: k, Value: v, Raw: Raw{mustRaw(t, k), mustRaw(t, v)}})
	for i, id := range backends {
		bk := k
		bk.Slot = uint16(i + 1)
		bv := ServiceValue{BackendID: id, RevNAT: revNAT}
		bv.FlagNames = bv.ServiceFlags().String()
		s.Services = append(s.Services, ServiceEntry{Key: bk, Value: bv, Raw: Raw{mustRaw(t, bk), mustRaw(t, bv)}})
	}
	if !fe.Addr().IsUnspecified() {
		rv := RevNATValue{Address: fe.Addr(), Port: fe.Port()}
		s.RevNAT = append(s.RevNAT, RevNATEntry{ID: revNAT, Value: rv, Raw: Raw{mustRaw(t, RevNATKey{revNAT}), mustRaw(t, rv)}})
	}
	return k
}

// setValue changes a frontend's value (for affinity timeouts and algorithms in the union).
func setValue(t testing.TB, s *State, k ServiceKey, f func(*ServiceValue)) {
	t.Helper()
	for i := range s.Services {
		if s.Services[i].Key == k {
			f(&s.Services[i].Value)
			s.Services[i].Raw.Value = mustRaw(t, s.Services[i].Value)
			return
		}
	}
	t.Fatalf("no service %v", k)
}

func addBackend(t testing.TB, s *State, id uint32, addr string, state uint8) {
	t.Helper()
	ap := netip.MustParseAddrPort(addr)
	v := BackendValue{Address: ap.Addr(), Port: ap.Port(), Proto: 6, Flags: state}
	s.Backends = append(s.Backends, BackendEntry{ID: id, Value: v, Raw: Raw{mustRaw(t, BackendKey{id}), mustRaw(t, v)}})
}

func addCT(t testing.TB, s *State, m string, k CTTuple, v CTEntry) {
	t.Helper()
	s.CT = append(s.CT, CTRow{Map: m, Key: k, Value: v, Raw: Raw{mustRaw(t, k), mustRaw(t, v)}})
}

func addMaglev(t testing.TB, s *State, revNAT uint16, lut []uint32) {
	t.Helper()
	b := make([]byte, 4*len(lut))
	for i, id := range lut {
		binary.LittleEndian.PutUint32(b[4*i:], id)
	}
	s.Maglev = append(s.Maglev, MaglevEntry{RevNAT: revNAT, LUT: b, Raw: Raw{Key: mustRaw(t, MaglevKey{ID: revNAT})}})
	s.MaglevLUTSize = len(lut)
}

// threeBackends is a NodePort 172.18.0.2:30510/TCP with rev-NAT 7 and backends 1-3 on other nodes.
func threeBackends(t testing.TB) (*State, ServiceKey) {
	s := newTestState(t)
	addBackend(t, s, 1, "10.244.1.5:80", BackendActive)
	addBackend(t, s, 2, "10.244.2.6:80", BackendActive)
	addBackend(t, s, 3, "10.244.3.7:8080", BackendActive)
	k := addService(t, s, netip.MustParseAddrPort("172.18.0.2:30510"), 6, 7, FlagNodePort|FlagRoutable, 1, 2, 3)
	// The surrogate and the wildcard the agent writes next to a NodePort.
	addService(t, s, netip.MustParseAddrPort("0.0.0.0:30510"), 6, 8, FlagNodePort, 1, 2, 3)
	addService(t, s, netip.MustParseAddrPort("172.18.0.2:0"), 0, 9, FlagRoutable)
	return s, k
}

func podNames(a netip.Addr) (string, string) {
	switch a.String() {
	case "10.244.1.5":
		return "default/web-a", "node-1"
	case "10.244.2.6":
		return "default/web-b", "node-2"
	case "10.244.3.7":
		return "default/web-c", "node-3"
	}
	return "", ""
}

// viaJSON sends a State through the snapshot's JSON form and returns what comes back.
func viaJSON(t testing.TB, s *State) *State {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back State
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	return &back
}
