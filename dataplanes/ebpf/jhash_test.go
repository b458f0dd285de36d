package ebpf

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"

	cebpf "github.com/cilium/ebpf"
)

// Known answers, computed by the kernel running Cilium's jhash.h (TestMaglevHashMatchesKernel checks them):
// they keep the Go jhash honest where the kernel test cannot run.
var jhashVectors = []struct {
	saddr        string
	sport, dport uint16
	proto        uint8
	seed         uint32
	want         uint32
}{
	{"172.18.0.100", 40000, 30510, 6, 0x5a5aa5a5, 0xaef7dd1f},
	{"10.0.0.1", 0, 80, 17, 0, 0xc7980ed0},
	{"192.168.1.200", 65535, 443, 6, 0xdeadbeef, 0x536ddddc},
}

func TestJhashKnownAnswers(t *testing.T) {
	for _, v := range jhashVectors {
		got := MaglevHash(binary.LittleEndian, netip.MustParseAddr(v.saddr), v.sport, v.dport, v.proto, v.seed)
		if got != v.want {
			t.Errorf("MaglevHash(%s, %d, %d, %d, %#x) = %#08x, the kernel says %#08x", v.saddr, v.sport, v.dport, v.proto, v.seed, got, v.want)
		}
	}
}

// TestMaglevHashMatchesKernel runs Cilium's own jhash_3words in the kernel (testdata/jhash_probe.c, via
// BPF_PROG_TEST_RUN) on many inputs laid out as on the wire, and compares it with MaglevHash: this checks the
// hash and the byte order of its inputs (network-order bytes loaded as host integers) at once.
func TestMaglevHashMatchesKernel(t *testing.T) {
	needRoot(t)
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the probe's inputs are laid out for a little-endian kernel")
	}
	obj := compileProbe(t, "jhash_probe")
	spec, err := cebpf.LoadCollectionSpec(obj)
	if err != nil {
		t.Fatal(err)
	}
	coll, err := cebpf.NewCollection(spec)
	if err != nil {
		if errors.Is(err, cebpf.ErrNotSupported) {
			t.Skipf("cannot load BPF programs here: %v", err)
		}
		t.Fatal(err)
	}
	defer coll.Close()
	prog := coll.Programs["jhash_probe"]

	kernel := func(saddr netip.Addr, sport, dport uint16, proto uint8, seed uint32) uint32 {
		t.Helper()
		// BPF_PROG_TEST_RUN of a tc program wants at least an Ethernet header's worth of data.
		data := make([]byte, 64)
		a := saddr.As4()
		copy(data[0:4], a[:])
		binary.BigEndian.PutUint16(data[4:6], sport)
		binary.BigEndian.PutUint16(data[6:8], dport)
		data[8] = proto
		binary.NativeEndian.PutUint32(data[12:16], seed)
		ret, err := prog.Run(&cebpf.RunOptions{Data: data})
		if err != nil {
			t.Fatal(err)
		}
		return ret
	}
	for _, v := range jhashVectors {
		a := netip.MustParseAddr(v.saddr)
		k := kernel(a, v.sport, v.dport, v.proto, v.seed)
		if k != v.want {
			t.Errorf("kernel jhash(%s, %d, %d, %d, %#x) = %#08x, the pinned answer is %#08x", v.saddr, v.sport, v.dport, v.proto, v.seed, k, v.want)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		var a [4]byte
		binary.NativeEndian.PutUint32(a[:], r.Uint32())
		saddr := netip.AddrFrom4(a)
		sport, dport := uint16(r.Uint32()), uint16(r.Uint32())
		if i%4 == 0 {
			sport = 0 // affinity services hash without the source port
		}
		proto := []uint8{6, 17, 132}[i%3]
		seed := r.Uint32()
		want := kernel(saddr, sport, dport, proto, seed)
		if got := MaglevHash(binary.NativeEndian, saddr, sport, dport, proto, seed); got != want {
			t.Fatalf("MaglevHash(%s, %d, %d, %d, %#x) = %#08x, the kernel's jhash gives %#08x", saddr, sport, dport, proto, seed, got, want)
		}
	}
}
