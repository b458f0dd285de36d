package ebpf

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf/datapath"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// hopFunctions splits every hop's Function ("a → b", "a, b", "a (wildcard)") into the names it holds.
func hopFunctions(hops []trace.Hop) []string {
	var out []string
	for _, h := range hops {
		f := strings.TrimSuffix(h.Function, " (wildcard)")
		for _, part := range strings.Split(f, " → ") {
			for _, name := range strings.Split(part, ", ") {
				if name != "" {
					out = append(out, name)
				}
			}
		}
	}
	return out
}

// The NodePort walk names Cilium's functions in the order the C calls them: nodeport_lb4's lookup, lb4_local's
// CT_SERVICE lookup and backend choice, nodeport_svc_lb4's DNAT, endpoint check, CT_EGRESS entry and SNAT.
func TestWalkNamesNodePortFunctions(t *testing.T) {
	s, _ := threeBackends(t)
	tr := walk(t, s, "172.18.0.100:40000", "172.18.0.2:30510", "tcp")
	p := tr.Paths[0]
	got := strings.Join(hopFunctions(p.Hops), " ")
	want := "nodeport_lb4 lb4_lookup_service lb4_local ct_lazy_lookup4 lb4_select_backend_id_random lb4_lookup_backend_slot " +
		"lb4_lookup_backend lb4_dnat_request __lookup_ip4_endpoint ct_lazy_lookup4 ct_create4 tail_nodeport_nat_egress_ipv4"
	if got != want {
		t.Errorf("functions along path 1:\n got %s\nwant %s", got, want)
	}
}

// Every function a walk names is one of Cilium v1.20.2's bpf/ sources: a reader can grep for it.
func TestWalkFunctionsExistInCiliumSources(t *testing.T) {
	src, err := datapath.Sources()
	if err != nil {
		t.Skipf("Cilium's bpf sources are not here to check against: %v", err)
	}
	var text strings.Builder
	for _, glob := range []string{"bpf/*.c", "bpf/lib/*.h", "bpf/include/bpf/*.h"} {
		files, _ := filepath.Glob(filepath.Join(src, glob))
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			text.Write(data)
		}
	}
	all := text.String()

	var names []string
	s, _ := threeBackends(t)
	for _, tr := range []*trace.Trace{
		walk(t, s, "172.18.0.100:40000", "172.18.0.2:30510", "tcp"),
		walk(t, s, "172.18.0.100:40000", "172.18.0.2:30999", "tcp"),
		walkFrom(t, podState(t), "10.244.2.6:40000", "10.96.0.10:80", false),
		walkFrom(t, podState(t), "172.18.0.2", "10.96.0.10:80", true),
	} {
		for _, p := range tr.Paths {
			names = append(names, hopFunctions(p.Hops)...)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) < 15 {
		t.Fatalf("only %d functions named: %v", len(names), names)
	}
	for _, n := range names {
		if !regexp.MustCompile(`\b` + regexp.QuoteMeta(n) + `\b`).MatchString(all) {
			t.Errorf("%q is not in Cilium %s's bpf sources (%s)", n, datapath.CiliumVersion, src)
		}
	}
}
