package ebpf

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/cilium/ebpf/btf"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf/datapath"
)

// bitField is a struct member's position in bits, as BTF gives it.
type bitField struct {
	off, size uint32
	bitfield  bool
}

// flatten lists a struct's members by name, descending into anonymous and named unions and structs
// ("client_id.client_ip"), with offsets from the outer struct's start.
func flatten(prefix string, base uint32, members []btf.Member, out map[string]bitField) {
	for _, m := range members {
		off := base + uint32(m.Offset)
		inner := btf.UnderlyingType(m.Type)
		var sub []btf.Member
		switch c := inner.(type) {
		case *btf.Struct:
			sub = c.Members
		case *btf.Union:
			sub = c.Members
		}
		if m.Name == "" {
			flatten(prefix, off, sub, out)
			continue
		}
		name := prefix + m.Name
		if m.BitfieldSize > 0 {
			out[name] = bitField{off, uint32(m.BitfieldSize), true}
		} else {
			size, err := btf.Sizeof(m.Type)
			if err != nil {
				panic(err)
			}
			out[name] = bitField{off, uint32(size) * 8, false}
		}
		if sub != nil {
			flatten(name+".", off, sub, out)
		}
	}
}

func structType(spec *btf.Spec, name string) (*btf.Struct, error) {
	types, err := spec.AnyTypesByName(name)
	if err != nil {
		return nil, err
	}
	for _, t := range types {
		if s, ok := t.(*btf.Struct); ok {
			return s, nil
		}
	}
	return nil, fmt.Errorf("%s is not a struct in the object's BTF", name)
}

// cName names a map's key or value type as MapTypes does: a struct by its name, an integer by its width.
func cName(t btf.Type) string {
	switch u := btf.UnderlyingType(t).(type) {
	case *btf.Struct:
		return u.Name
	case *btf.Int:
		return fmt.Sprintf("u%d", u.Size*8)
	}
	return fmt.Sprintf("%T", t)
}

// TestLayoutsMatchBPFHost compiles Cilium's bpf_host.c as the lab does and checks every struct this package
// decodes (size, and each field's offset and width), the key and value types of every map it reads, and the
// config variables it decodes, against the object's BTF: an upstream layout change fails here.
func TestLayoutsMatchBPFHost(t *testing.T) {
	spec := compiledBTF(t, datapath.Options{NodeIP: netip.MustParseAddr("172.18.0.2")})

	checkLayouts(t, spec, Layouts)
	checkMapTypes(t, spec, MapTypes, "bpf_host.o")

	// The load-time constants Config decodes, by name and width.
	var rodata *btf.Datasec
	if err := spec.TypeByName(".rodata.config", &rodata); err != nil {
		t.Fatal(err)
	}
	vars := map[string]int{}
	for _, vs := range rodata.Vars {
		v := vs.Type.(*btf.Var)
		size, _ := btf.Sizeof(v.Type)
		vars[v.Name] = size
	}
	for name, size := range map[string]int{"hash_init4_seed": 4, "lb_default_alg": 1, "lb_selection_per_service": 1,
		"nodeport_port_min": 2, "nodeport_port_max": 2, "interface_ifindex": 4, "enable_no_service_endpoints_routable": 1,
		"enable_nodeport_source_lookup": 1, "enable_jiffies": 1, "kernel_hz": 4} {
		if got, ok := vars[configPrefix+name]; !ok || got != size {
			t.Errorf("config %s: %d bytes in .rodata.config (present %v), want %d", name, got, ok, size)
		}
	}
}

// TestConstantsMatchSources checks the C constants the walk relies on against the pinned sources.
func TestConstantsMatchSources(t *testing.T) {
	src, _ := ciliumSources(t)
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(src, rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	define := func(text, name string) int {
		m := regexp.MustCompile(`(?m)^#define\s+` + name + `\s+(\S+)`).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("no #define %s", name)
		}
		v, err := strconv.ParseInt(m[1], 0, 64)
		if err != nil {
			t.Fatalf("#define %s %s", name, m[1])
		}
		return int(v)
	}
	enum := func(text, name string) int {
		m := regexp.MustCompile(name + `\s*=\s*\(1 << (\d+)\)`).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("no %s = (1 << n)", name)
		}
		v, _ := strconv.Atoi(m[1])
		return 1 << v
	}
	tail, lb, common, sel := read("bpf/lib/tailcall.h"), read("bpf/lib/lb.h"), read("bpf/lib/common.h"), read("bpf/include/bpf/lb_selection.h")
	checks := []struct {
		name      string
		got, want int
	}{
		{"CILIUM_CALL_IPV4_NO_SERVICE", define(tail, "CILIUM_CALL_IPV4_NO_SERVICE"), callNoService},
		{"TUPLE_F_SERVICE", define(common, "TUPLE_F_SERVICE"), TupleService},
		{"TUPLE_F_IN", define(common, "TUPLE_F_IN"), TupleIn},
		{"LB_SELECTION_RANDOM", define(sel, "LB_SELECTION_RANDOM"), AlgRandom},
		{"LB_SELECTION_MAGLEV", define(sel, "LB_SELECTION_MAGLEV"), AlgMaglev},
		{"SVC_FLAG_NODEPORT", enum(lb, "SVC_FLAG_NODEPORT"), int(FlagNodePort)},
		{"SVC_FLAG_AFFINITY", enum(lb, "SVC_FLAG_AFFINITY"), int(FlagSessionAffinity)},
		{"SVC_FLAG_ROUTABLE", enum(lb, "SVC_FLAG_ROUTABLE"), int(FlagRoutable)},
		{"SVC_FLAG_SOURCE_RANGE", enum(lb, "SVC_FLAG_SOURCE_RANGE"), int(FlagSourceRange)},
		{"SVC_FLAG_L7_LOADBALANCER", enum(lb, "SVC_FLAG_L7_LOADBALANCER") << 8, int(FlagL7LoadBalancer)},
		{"SVC_FLAG_TWO_SCOPES", enum(lb, "SVC_FLAG_TWO_SCOPES") << 8, int(FlagTwoScopes)},
		{"SVC_FLAG_FWD_MODE_DSR", enum(lb, "SVC_FLAG_FWD_MODE_DSR") << 8, int(FlagFwdModeDSR)},
		{"LB_ALGORITHM_SHIFT", define(lb, "LB_ALGORITHM_SHIFT"), 24},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s is %d in Cilium %s, this package uses %d", c.name, c.got, datapath.CiliumVersion, c.want)
		}
	}
}

// compiledBTF compiles one of Cilium's programs as the lab does and returns the object's BTF.
func compiledBTF(t *testing.T, o datapath.Options) *btf.Spec {
	t.Helper()
	ciliumSources(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	obj, err := datapath.Compile(ctx, o, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	spec, err := btf.LoadSpec(obj)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// checkLayouts checks each struct's size and its fields' offsets and widths against the object's BTF.
func checkLayouts(t *testing.T, spec *btf.Spec, layouts []Layout) {
	t.Helper()
	for _, l := range layouts {
		t.Run(l.Struct, func(t *testing.T) {
			st, err := structType(spec, l.Struct)
			if err != nil {
				t.Fatal(err)
			}
			if int(st.Size) != l.Size {
				t.Errorf("struct %s is %d bytes in Cilium's BTF, this package decodes %d", l.Struct, st.Size, l.Size)
			}
			fields := map[string]bitField{}
			flatten("", 0, st.Members, fields)
			for _, f := range l.Fields {
				got, ok := fields[f.Name]
				if !ok {
					t.Errorf("%s.%s: no such member in Cilium's BTF (members: %v)", l.Struct, f.Name, fields)
					continue
				}
				want := bitField{uint32(f.Off*8 + f.Bit), uint32(f.Size * 8), f.Bits > 0}
				if f.Bits > 0 {
					want.size = uint32(f.Bits)
				}
				if got != want {
					t.Errorf("%s.%s: BTF bit offset %d width %d (bit field %v), this package reads bit %d width %d",
						l.Struct, f.Name, got.off, got.size, got.bitfield, want.off, want.size)
				}
			}
		})
	}

}

// checkMapTypes checks the key and value types of the maps in types as the object's .maps section declares them.
func checkMapTypes(t *testing.T, spec *btf.Spec, types map[string][2]string, object string) {
	t.Helper()
	var maps *btf.Datasec
	if err := spec.TypeByName(".maps", &maps); err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, vs := range maps.Vars {
		v := vs.Type.(*btf.Var)
		want, ok := types[v.Name]
		if !ok {
			continue
		}
		found[v.Name] = true
		def := btf.UnderlyingType(v.Type).(*btf.Struct)
		got := [2]string{}
		for _, m := range def.Members {
			switch m.Name {
			case "key":
				got[0] = cName(m.Type.(*btf.Pointer).Target)
			case "value":
				got[1] = cName(m.Type.(*btf.Pointer).Target)
			}
		}
		if got != want {
			t.Errorf("map %s: key/value %v in Cilium's BTF, this package reads %v", v.Name, got, want)
		}
	}
	for name := range types {
		if !found[name] {
			t.Errorf("map %s is not in %s", name, object)
		}
	}
}

// TestLayoutsMatchBPFSock checks the socket LB's own map (cilium_lb4_reverse_sk, which `lb socknat` reads)
// against bpf_sock.c compiled as the lab compiles it.
func TestLayoutsMatchBPFSock(t *testing.T) {
	spec := compiledBTF(t, datapath.Options{Program: datapath.Sock, NodeIP: netip.MustParseAddr("172.18.0.2"), HostNetnsCookie: 1})
	checkLayouts(t, spec, SockLayouts)
	checkMapTypes(t, spec, SockMapTypes, "bpf_sock.o")
}
