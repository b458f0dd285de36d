package tracer

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// TestLoadRefuses: input no node's dump can be ends in one line, quickly, without reading it all (issue 18,
// item 5): binary data (/dev/zero ran out of memory before), more than MaxInput, chains in a loop.
func TestLoadRefuses(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.txt")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(200 << 20); err != nil { // a sparse 200 MB file
		t.Fatal(err)
	}
	f.Close()
	loop := filepath.Join(dir, "loop.save")
	os.WriteFile(loop, []byte("*nat\n:PREROUTING ACCEPT [0:0]\n:A - [0:0]\n-A PREROUTING -j A\n-A A -g A\nCOMMIT\n"), 0o644)
	for _, tc := range []struct {
		path string
		in   io.Reader
		want string
	}{
		{"/dev/zero", nil, "binary data"},
		{big, nil, "200 MB is more than a node's dump"},
		{"-", io.MultiReader(strings.NewReader("-A A -j B\n"), bytes.NewReader(bytes.Repeat([]byte("x"), MaxInput))), "more than 64 MB"},
		{loop, nil, "the rules loop: nat/A -> A"},
	} {
		_, err := LoadFile(tc.path, tc.in, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line with %q", tc.path, err, tc.want)
		}
	}
}

// TestPastedTrace: a paste with prompts and two commands' outputs traces, says how it was read, and names its
// dataplane (JSON's dataplane was empty for a dump no part of which serves Services).
func TestPastedTrace(t *testing.T) {
	paste := "```\nroot@node:~# iptables -t nat -S\n-P PREROUTING ACCEPT\n-N KUBE-SERVICES\n-A PREROUTING -j KUBE-SERVICES\n" +
		"-A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m tcp --dport 53 -j DNAT --to-destination 10.244.0.2:53\n" +
		"root@node:~# iptables -L FORWARD -n\nChain FORWARD (policy DROP)\ntarget     prot opt source               destination\nACCEPT     all  --  0.0.0.0/0            10.244.0.0/16\n```\n"
	s, err := Load([]byte(paste), nil)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := Trace(s, Request{Dst: "10.96.0.10:53", Src: "198.51.100.7"})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Verdict != trace.Delivered || len(tr.Endpoints) != 1 || tr.Dataplane != "iptables" {
		t.Fatalf("verdict %s, endpoints %v, dataplane %q", tr.Verdict, tr.Endpoints, tr.Dataplane)
	}
	// Each path's endpoint carries the endpoint's overall chance (the issue saw 0 in paths[].endpoint).
	for _, p := range tr.Paths {
		if p.Endpoint == nil || p.Endpoint.Probability != 1 {
			t.Errorf("path endpoint %+v", p.Endpoint)
		}
	}
	notes := strings.Join(tr.Notes, "\n")
	for _, want := range []string{"stripped: markdown fences", "read as: iptables -t nat -S [2 chains", "iptables -L FORWARD -n [1 chain; a part of the rules]"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	// A filter table alone: the trace walks it, names it, and cannot tell a Service's answer.
	s, err = Load([]byte("*filter\n:FORWARD ACCEPT [0:0]\n-A FORWARD -j ACCEPT\nCOMMIT\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	tr, err = Trace(s, Request{Dst: "10.96.0.10:53"})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Dataplane != "iptables" || tr.Verdict != trace.Unknown || !strings.Contains(strings.Join(tr.Missing, ";"), "the nat table") {
		t.Errorf("dataplane %q, verdict %s, missing %q", tr.Dataplane, tr.Verdict, tr.Missing)
	}
}

// TestSnapshotBinaryBounded: the command itself, on endless binary input (/dev/zero ran out of memory before),
// ends with one line and a non-zero exit (TestLoadRefuses covers the loop and the 200 MB file through LoadFile).
func TestSnapshotBinaryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "k8sguide")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/k8sguide").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, in := range []string{"/dev/zero", "/dev/urandom"} {
		out, err := exec.Command(bin, "trace", "--snapshot", in, "--dst", "10.96.0.1:443").CombinedOutput()
		if err == nil || strings.Count(strings.TrimSpace(string(out)), "\n") != 0 {
			t.Errorf("%s: %v: %q", in, err, out)
		}
	}
}

// TestIfaces: rules on -i decide by the interface the trace assumes for a dump that names none; the note says
// which, and --in-iface/--out-iface change them (before, eth0 was assumed and never said). A rule on -o is not
// decided by an assumed output interface (issue 35): the masquerade on it leaves the source unknown until
// --out-iface says where the packet leaves.
func TestIfaces(t *testing.T) {
	dump := "*nat\n:PREROUTING ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n" +
		"-A PREROUTING -i cbr0 -j RETURN\n-A PREROUTING -d 10.96.0.10/32 -p tcp -j DNAT --to-destination 10.244.0.2:53\n" +
		"-A POSTROUTING -o eth1 -j MASQUERADE\nCOMMIT\n"
	s, err := Load([]byte(dump), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		in, out    string
		translated bool
		snat       string
		note       string
	}{
		{"", "", true, trace.Unknown, "interfaces assumed: the packet arrives on eth0 and leaves by eth0"},
		{"", "eth1", true, "", "interfaces as given: the packet arrives on eth0 and leaves by eth1"},
		{"", "eth0", true, "198.51.100.7", "interfaces as given: the packet arrives on eth0 and leaves by eth0"},
		{"cbr0", "", false, trace.Unknown, "arrives on cbr0"},
	} {
		tr, err := Trace(s, Request{Dst: "10.96.0.10:53", Src: "198.51.100.7", InIface: tc.in, OutIface: tc.out})
		if err != nil {
			t.Fatal(err)
		}
		if (len(tr.Endpoints) == 1) != tc.translated || tc.snat != "" && tr.SNAT != tc.snat || tc.snat == "" && tr.SNAT == "198.51.100.7" {
			t.Errorf("in %q out %q: endpoints %v, snat %q", tc.in, tc.out, tr.Endpoints, tr.SNAT)
		}
		if !strings.Contains(strings.Join(tr.Notes, "\n"), tc.note) {
			t.Errorf("in %q out %q: notes %q lack %q", tc.in, tc.out, tr.Notes, tc.note)
		}
	}
}
