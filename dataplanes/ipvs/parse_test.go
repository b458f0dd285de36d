package ipvs_test

import (
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/ipvs"
	"github.com/k8sguide/k8sguide/dataplanes/netstate"
	"github.com/k8sguide/k8sguide/inspect/snapshot"
	"github.com/k8sguide/k8sguide/inspect/tracer"
)

// The fixtures in testdata/vm-* were captured in the IPVS test VM by TestGuestNodePort run with
// `go test ./dataplanes/ipvs/ -run TestIPVSInVM -v -args -ipvs.capture`: the upstream ipvs proxier (v1.36.4)
// serving the web NodePort Service (3 endpoints) on Debian's 6.1.0-56-cloud-amd64 kernel. "-after" files were
// taken after six client connections. snapshot*.json are the collector's output there (IPVS over netlink).

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func loadSnapshot(t *testing.T, name string) *snapshot.Snapshot {
	t.Helper()
	s, err := snapshot.Parse([]byte(read(t, name)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// stateOf is the IPVS table a snapshot holds.
func stateOf(t *testing.T, s *snapshot.Snapshot) *ipvs.State {
	t.Helper()
	part := s.Part(dataplanes.IPVS)
	if part == nil {
		t.Fatalf("the snapshot has no IPVS table (missing: %v)", s.Missing)
	}
	st, err := ipvs.Decode(part)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// ipvsadm -Ln and the netlink dump describe the same table. ipvsadm sorts real servers for display; the
// netlink dump keeps the kernel's list order (newest first), which is the order rr takes.
func TestListingAgreesWithNetlink(t *testing.T) {
	listed, err := ipvs.ParseList(read(t, "vm-ipvsadm-Ln.txt"))
	if err != nil {
		t.Fatal(err)
	}
	dumped := stateOf(t, loadSnapshot(t, "vm-snapshot.json"))
	key := func(v ipvs.VirtualServer) string {
		var rs []string
		for _, r := range v.RealServers {
			rs = append(rs, r.Line())
		}
		slices.Sort(rs)
		return v.Name() + " " + strings.Join(rs, ", ")
	}
	var a, b []string
	for _, v := range listed.Services {
		a = append(a, key(v))
	}
	for _, v := range dumped.Services {
		b = append(b, key(v))
	}
	slices.Sort(a)
	slices.Sort(b)
	if !slices.Equal(a, b) || len(a) != 3 {
		t.Fatalf("ipvsadm -Ln:\n%s\nnetlink:\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
	}
	v := dumped.Find("tcp", netip.MustParseAddr("172.18.0.2"), 30080, 0)
	if v == nil || v.RealServers[0].Address.String() != "10.244.0.4" || v.RealServers[0].Forward != "Masq" {
		t.Fatalf("NodePort virtual server from netlink: %+v; want the newest endpoint 10.244.0.4 first, Masq", v)
	}
	if _, err := ipvs.ParseList("IP Virtual Server version 1.2.1 (size=4096)\n  -> 10.0.0.1:80 Masq 1 0 0\n"); err == nil {
		t.Error("a real server before any virtual server parsed")
	}
}

// /proc/net/ip_vs_conn (hex) and ipvsadm -Lnc (dotted) were read one after the other: the same six entries.
func TestConnectionsBothForms(t *testing.T) {
	proc, err := ipvs.ParseConnections(read(t, "vm-ip_vs_conn-after.txt"))
	if err != nil {
		t.Fatal(err)
	}
	lnc, err := ipvs.ParseConnections(read(t, "vm-ipvsadm-Lnc-after.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(proc) != 6 || len(lnc) != 6 {
		t.Fatalf("%d and %d entries, want 6", len(proc), len(lnc))
	}
	for i := range proc {
		p, l := proc[i], lnc[i]
		if p.Client != l.Client || p.Virtual != l.Virtual || p.Dest != l.Dest || p.State != l.State || p.Expires-l.Expires > 1 {
			t.Errorf("entry %d: /proc %+v, ipvsadm %+v", i, p, l)
		}
	}
	if proc[0].Client.String() != "172.18.0.1:40004" || proc[0].Dest.String() != "10.244.0.4:8080" {
		t.Errorf("first entry %+v", proc[0])
	}
	if _, err := ipvs.ParseConnections("TCP ZZ 9C44 AC120002 7580 0AF40004 1F90 TIME_WAIT 119\n"); err == nil {
		t.Error("a bad hex address parsed")
	}
}

// kube-proxy's sets from `ipset save`, and the packets its rules test against them.
func TestIPSetSave(t *testing.T) {
	sets, err := netstate.ParseIPSetSave(read(t, "vm-ipset-save.txt"))
	if err != nil {
		t.Fatal(err)
	}
	st := netstate.State{IPSets: sets}
	pkt := func(dst string, dport uint16) netstate.SetPacket {
		return netstate.SetPacket{Src: netip.MustParseAddr("172.18.0.1"), Dst: netip.MustParseAddr(dst), Sport: 40000, Dport: dport, Proto: "tcp"}
	}
	for _, tc := range []struct {
		set, dirs string
		p         netstate.SetPacket
		want      bool
	}{
		{"KUBE-NODE-PORT-TCP", "dst", pkt("172.18.0.2", 30080), true},
		{"KUBE-NODE-PORT-TCP", "dst", pkt("172.18.0.2", 30081), false},
		{"KUBE-CLUSTER-IP", "dst,dst", pkt("10.96.0.100", 80), true},
		{"KUBE-CLUSTER-IP", "dst,dst", pkt("10.96.0.100", 81), false},
		{"KUBE-CLUSTER-IP", "dst,dst", netstate.SetPacket{Dst: netip.MustParseAddr("10.96.0.100"), Dport: 80, Proto: "udp"}, false},
	} {
		set, ok := st.IPSet(tc.set)
		if !ok {
			t.Fatalf("no set %s in %d sets", tc.set, len(sets))
		}
		if got, what := set.Match(tc.dirs, tc.p); got != tc.want {
			t.Errorf("%s %s %s: %v, want %v", tc.set, tc.dirs, what, got, tc.want)
		}
	}
	if _, err := netstate.ParseIPSetSave("add NOSET 1\n"); err == nil {
		t.Error("an add before its create parsed")
	}
}

// The offline trace from the VM's snapshot says what the kernel then did (TestGuestNodePort checked it live):
// the first connection goes to the head of the list, 10.244.0.4, then .3, then .2; and an existing flow is
// decided by its connection entry.
func TestTraceFromVMSnapshot(t *testing.T) {
	s := loadSnapshot(t, "vm-snapshot.json")
	tr, err := tracer.Trace(s, tracer.Request{Dst: "172.18.0.2:30080", Src: "172.18.0.1:40000"})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, e := range tr.Endpoints {
		order = append(order, e.IP)
		if e.Turn != len(order) {
			t.Errorf("endpoint %s has turn %d, want %d", e.IP, e.Turn, len(order))
		}
	}
	if !slices.Equal(order, []string{"10.244.0.4", "10.244.0.3", "10.244.0.2"}) || tr.SNAT != "10.244.0.1" || tr.Dataplane != "ipvs" {
		t.Fatalf("endpoints %v, snat %s, dataplane %s", order, tr.SNAT, tr.Dataplane)
	}
	after := loadSnapshot(t, "vm-snapshot-after.json")
	again, err := tracer.Trace(after, tracer.Request{Dst: "172.18.0.2:30080", Src: "172.18.0.1:40002"})
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Endpoints) != 1 || again.Endpoints[0].IP != "10.244.0.3" {
		t.Fatalf("existing flow from port 40002: endpoints %+v; its entry says 10.244.0.3", again.Endpoints)
	}
	// From ipvsadm -Ln alone (no counters, sorted): the same three endpoints, no turn.
	listed, err := tracer.Load([]byte(read(t, "vm-ipvsadm-Ln.txt")), []netip.Addr{netip.MustParseAddr("172.18.0.2")})
	if err != nil {
		t.Fatal(err)
	}
	fromList, err := tracer.Trace(listed, tracer.Request{Dst: "172.18.0.2:30080"})
	if err != nil {
		t.Fatal(err)
	}
	if len(fromList.Endpoints) != 3 || fromList.Endpoints[0].Turn != 0 {
		t.Fatalf("trace from ipvsadm -Ln: %+v", fromList.Endpoints)
	}
}
