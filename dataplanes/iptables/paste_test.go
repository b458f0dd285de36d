package iptables

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
	"github.com/k8sguide/k8sguide/dataplanes/netstate"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// pasteWalk reads a pasted dump as the engine does and walks a packet from outside to dst through it.
func pasteWalk(t *testing.T, dump, dst string, local ...string) *trace.Trace {
	t.Helper()
	r, err := parse(dump)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	var addrs []netip.Addr
	for _, a := range local {
		addrs = append(addrs, netip.MustParseAddr(a))
	}
	st := netstate.FromLocalAddresses(addrs)
	d := netip.MustParseAddrPort(dst)
	tr := &trace.Trace{}
	tr.Paths, tr.Notes, tr.Conntrack = netfilter.Run([]netfilter.Ruleset{r}, &st,
		trace.Flow{Src: netip.MustParseAddr("198.51.100.7"), Dst: d.Addr(), Dport: d.Port(), Proto: "tcp"}, netfilter.Origin{Iif: "eth0"}, nil)
	tr.Finish()
	return tr
}

// svc is a Service's nat rules (kube-proxy 1.2x) for the readers' tests.
const svcSave = `-A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m comment --comment "kube-system/dns:tcp cluster IP" -m tcp --dport 53 -j KUBE-SVC-A
-A KUBE-SVC-A -m statistic --mode random --probability 0.50000000000 -j KUBE-SEP-1
-A KUBE-SVC-A -j KUBE-SEP-2
-A KUBE-SEP-1 -p tcp -m tcp -j DNAT --to-destination 10.244.0.2:53
-A KUBE-SEP-2 -p tcp -m tcp -j DNAT --to-destination 10.244.0.3:53`

// cutS is an `iptables -t nat -S` output whose last chains print no rules: cut there, or empty.
const cutS = "$ iptables -t nat -S\n-P PREROUTING ACCEPT\n-N KUBE-SERVICES\n-N KUBE-SVC-A\n-A PREROUTING -j KUBE-SERVICES\n-A KUBE-SERVICES -d 10.96.0.99/32 -j KUBE-SVC-A"

// listed is the head of an `iptables -t nat -L -n` listing, up to KUBE-SERVICES' rules.
const listed = "$ iptables -t nat -L -n\nChain PREROUTING (policy ACCEPT)\ntarget     prot opt source               destination\nKUBE-SERVICES  all  --  0.0.0.0/0            0.0.0.0/0\n\nChain KUBE-SERVICES (1 references)\ntarget     prot opt source               destination\n"

// TestPastedForms: each iptables form people paste (issue 18, items 2 and 4), small inputs of their own; each was
// refused or answered wrongly before.
func TestPastedForms(t *testing.T) {
	for _, tc := range []struct {
		name, dump, dst string
		verdict         string
		endpoints       int
		missing         string // a word of Missing, for unknown
	}{
		{"iptables -S", "$ iptables -t nat -S\n-P PREROUTING ACCEPT\n-P POSTROUTING ACCEPT\n-N KUBE-SERVICES\n-N KUBE-SVC-A\n-N KUBE-SEP-1\n-N KUBE-SEP-2\n-A PREROUTING -j KUBE-SERVICES\n" + svcSave + "\n-N KUBE-ZZZ",
			"10.96.0.10:53", trace.Delivered, 2, ""},
		{"iptables -S cut before its last chains", cutS,
			"10.96.0.10:53", trace.Unknown, 0, "the rest of nat/KUBE-SERVICES"},
		{"restore input: kube-proxy's chains only", "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-A - [0:0]\n:KUBE-SEP-1 - [0:0]\n:KUBE-SEP-2 - [0:0]\n-X KUBE-SEP-OLD\n" + svcSave + "\nCOMMIT",
			"10.96.0.10:53", trace.Delivered, 2, ""},
		{"restore input: -I puts a rule first", "*nat\n:PREROUTING ACCEPT [0:0]\n:X - [0:0]\n-A PREROUTING -j ACCEPT\n-I PREROUTING -j X\n-A X -j DNAT --to-destination 10.244.0.9:80\nCOMMIT",
			"10.96.0.10:53", trace.Delivered, 1, ""},
		{"a dump cut mid-rule", "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-A - [0:0]\n-A PREROUTING -j KUBE-SERVICES\n-A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m tcp --dport 53 -j KUBE-SV",
			"10.96.0.10:53", trace.Unknown, 0, "no COMMIT"},
		{"a jump to a chain not in the dump", "*nat\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -j cali-PREROUTING\nCOMMIT",
			"10.96.0.10:53", trace.Unknown, 0, "chain nat/cali-PREROUTING"},
		{"a grep'd fragment that translates nothing", "-A KUBE-SVC-A -m statistic --mode random --probability 0.5 -j KUBE-SEP-1",
			"10.96.0.10:53", trace.Delivered, 0, ""}, // the tracer makes this unknown from Opened.Missing (TestOpenMissing)
		{"-L without -n: anywhere and dpt:domain", "$ iptables -t nat -L\nChain PREROUTING (policy ACCEPT)\ntarget     prot opt source               destination\nKUBE-SERVICES  all  --  anywhere             anywhere\n\nChain KUBE-SERVICES (1 references)\ntarget     prot opt source               destination\nDNAT       tcp  --  anywhere             10.96.0.10           tcp dpt:domain to:10.244.0.2:53",
			"10.96.0.10:53", trace.Delivered, 1, ""},
		{"-L without -n: a host name", "$ iptables -t nat -L\nChain PREROUTING (policy ACCEPT)\ntarget     prot opt source               destination\nDNAT       tcp  --  anywhere             kube-dns.kube-system.svc.cluster.local  tcp dpt:53 to:10.244.0.2:53",
			"10.96.0.10:53", trace.Unknown, 0, "printed a name"},
		// The same with the empty prompt the paste front end puts after an output it shows whole (a closing fence).
		{"iptables -S shown whole", cutS + "\n$ ",
			"10.96.0.10:53", trace.Delivered, 0, ""},
		// The same cut -S output with another command's output after it: whole as pasted, its empty last
		// chain is empty (before: "the rest of nat/KUBE-SERVICES" for every -S output but the last).
		{"iptables -S followed by another output", cutS + "\n$ iptables -t filter -S\n-P FORWARD ACCEPT",
			"10.96.0.10:53", trace.Delivered, 0, ""},
		// Lines the paste left out ("and more....." in an issue): a walk reaching them is unknown (before: the
		// whole paste was refused with "short listing rule").
		{"-L with lines left out before the match", listed + "DNAT       tcp  --  0.0.0.0/0            10.96.0.11           tcp dpt:53 to:10.244.0.3:53\n\nand more.....\n\nDNAT       tcp  --  0.0.0.0/0            10.96.0.10           tcp dpt:53 to:10.244.0.2:53",
			"10.96.0.10:53", trace.Unknown, 0, "the rules the paste left out of nat/KUBE-SERVICES"},
		{"-L with lines left out after the match", listed + "DNAT       tcp  --  0.0.0.0/0            10.96.0.10           tcp dpt:53 to:10.244.0.2:53\n...",
			"10.96.0.10:53", trace.Delivered, 1, ""},
		{"save lines with lines left out", "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-A - [0:0]\n:KUBE-SEP-1 - [0:0]\n:KUBE-SEP-2 - [0:0]\n-A PREROUTING -j KUBE-SERVICES\n[...]\n" + svcSave + "\nCOMMIT",
			"10.96.0.10:53", trace.Unknown, 0, "where it says \"[...]\""},
		{"-L with a policy DROP and no counters", "Chain FORWARD (policy DROP)\ntarget     prot opt source               destination\nACCEPT     all  --  10.0.0.0/8           0.0.0.0/0",
			"10.96.0.10:53", trace.Dropped, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := pasteWalk(t, tc.dump, tc.dst)
			if tr.Verdict != tc.verdict || len(tr.Endpoints) != tc.endpoints || !strings.Contains(strings.Join(tr.Missing, ";"), tc.missing) {
				t.Errorf("verdict %s, %d endpoints, missing %q; want %s, %d, %q", tr.Verdict, len(tr.Endpoints), tr.Missing, tc.verdict, tc.endpoints, tc.missing)
			}
		})
	}
}

// TestListingTable: a listing with no -t is filter's (plain `iptables -L`) unless its chains or targets are nat's
// only; the command's -t decides when the paste shows it. Before, every header-less listing was nat.
func TestListingTable(t *testing.T) {
	for _, tc := range []struct{ dump, table string }{
		{"Chain INPUT (policy ACCEPT)\ntarget     prot opt source               destination\nACCEPT     all  --  0.0.0.0/0            0.0.0.0/0", "filter"},
		{"Chain KUBE-SEP-1 (1 references)\ntarget     prot opt source               destination\nDNAT       tcp  --  0.0.0.0/0            0.0.0.0/0            tcp to:10.244.0.2:53", "nat"},
		{"$ iptables -L -n\nChain KUBE-SEP-1 (1 references)\ntarget     prot opt source               destination\nKUBE-MARK-MASQ  all  --  10.244.0.2  0.0.0.0/0", "filter"},
		{"$ sudo iptables -t mangle -nvL\nChain INPUT (policy ACCEPT 0 packets, 0 bytes)\n pkts bytes target     prot opt in     out     source               destination", "mangle"},
		{"-A KUBE-FORWARD -j ACCEPT", "filter"},
		{"-A KUBE-SVC-A -j KUBE-SEP-1", "nat"},
	} {
		r, err := parse(tc.dump)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := r.Tables[tc.table]; !ok || len(r.Tables) != 1 {
			t.Errorf("%q: tables %v, want %s", tc.dump, sortedKeys(r.Tables), tc.table)
		}
	}
}

// TestOpenMissing: the engine says what a part lacks, so that the tracer does not call an untranslated end
// "forwarded without translation": a part of the rules, a dump without the nat table.
func TestOpenMissing(t *testing.T) {
	for _, tc := range []struct{ dump, missing string }{
		{"-A KUBE-SVC-A -j KUBE-SEP-1", "a part of them"},
		{"*filter\n:FORWARD ACCEPT [0:0]\n-A FORWARD -j ACCEPT\nCOMMIT", "the nat table"},
		{"*nat\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -j ACCEPT\nCOMMIT", ""},
		// An IPVS-mode node's rules without its IPVS table (before: "the node's own socket answers").
		{"*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n-A PREROUTING -j KUBE-SERVICES\n-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT\nCOMMIT", "the IPVS table"},
	} {
		sn, ok, err := Engine{}.Sniff(tc.dump)
		if !ok || err != nil {
			t.Fatal(ok, err)
		}
		o, err := Engine{}.Open(sn.Part, dataplanes.OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Join(o.Missing, ";")
		if tc.missing == "" && got != "" || !strings.Contains(got, tc.missing) {
			t.Errorf("%q: missing %q, want %q", tc.dump, got, tc.missing)
		}
	}
}

// TestLoopsRefused: chains that jump or go to each other in a circle (the kernel refuses them) are one clear
// error, not a walk that grows until it crashes (it grew at about 1 GB/s before).
func TestLoopsRefused(t *testing.T) {
	for _, dump := range []string{
		"*nat\n:PREROUTING ACCEPT [0:0]\n:A - [0:0]\n-A PREROUTING -j A\n-A A -g A\nCOMMIT",
		"*nat\n:PREROUTING ACCEPT [0:0]\n:A - [0:0]\n:B - [0:0]\n-A PREROUTING -j A\n-A A -j B\n-A B -p tcp -j A\nCOMMIT",
		"-A A -j B\n-A B -j A",
	} {
		_, ok, err := Engine{}.Sniff(dump)
		if !ok || err == nil || !strings.Contains(err.Error(), "the rules loop") {
			t.Errorf("%q: %v", dump, err)
		}
	}
}

// TestSetsNotShown: a rule testing an ipset the paste does not hold, or holds cut short without the packet, is
// unknown, naming the set (before: "assumed to match", a confident path through Calico's or kube-router's sets).
func TestSetsNotShown(t *testing.T) {
	const dump = "*nat\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -m set --match-set cali40svc dst -j DNAT --to-destination 10.244.0.9:80\nCOMMIT"
	walk := func(sets []netstate.IPSet) *trace.Trace {
		r, err := parse(dump)
		if err != nil {
			t.Fatal(err)
		}
		st := netstate.FromLocalAddresses(nil)
		st.IPSets = sets
		tr := &trace.Trace{}
		tr.Paths, tr.Notes, tr.Conntrack = netfilter.Run([]netfilter.Ruleset{r}, &st,
			trace.Flow{Src: netip.MustParseAddr("198.51.100.7"), Dst: netip.MustParseAddr("10.96.0.5"), Dport: 80, Proto: "tcp"}, netfilter.Origin{FromNode: true}, nil)
		tr.Finish()
		return tr
	}
	list := func(members string, count int) []netstate.IPSet {
		text := fmt.Sprintf("Name: cali40svc\nType: hash:ip\nRevision: 4\nHeader: family inet hashsize 1024 maxelem 65536\nSize in memory: 200\nReferences: 1\nNumber of entries: %d\nMembers:\n%s", count, members)
		sets, err := netstate.ParseIPSetList(text)
		if err != nil {
			t.Fatal(err)
		}
		return sets
	}
	for _, tc := range []struct {
		name      string
		sets      []netstate.IPSet
		verdict   string
		endpoints int
		missing   string
	}{
		{"set not pasted", nil, trace.Unknown, 0, "ipset cali40svc (a rule tests it; the input does not hold it"},
		// The paste ends inside the members: the last one shown may be cut short, so it is not counted.
		{"set cut short", list("10.96.0.7\n10.96.0.8\n", 3), trace.Unknown, 0, "whether 10.96.0.5 is in ipset cali40svc: the listing shows 1 of its 3 members"},
		{"packet in a cut set", list("10.96.0.5\n10.96.0.8\n", 3), trace.Delivered, 1, ""},
		{"whole set without it", list("10.96.0.7\n", 1), trace.Delivered, 0, ""},
	} {
		tr := walk(tc.sets)
		if tr.Verdict != tc.verdict || len(tr.Endpoints) != tc.endpoints || !strings.Contains(strings.Join(tr.Missing, ";"), tc.missing) {
			t.Errorf("%s: %s to %v, missing %q; want %s to %d endpoints, %q", tc.name, tr.Verdict, tr.Endpoints, tr.Missing, tc.verdict, tc.endpoints, tc.missing)
		}
	}
}
