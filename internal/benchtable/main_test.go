package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestTable: a benchmark's figures sit beside its floor's, with the ratio; other metrics are kept as they are.
func TestTable(t *testing.T) {
	in := `goos: linux
BenchmarkTraceLive/iptables/5000-2   	       1	 812000000 ns/op	 5000 services	 400 ms	 380 cpu-ms	 60.5 MB	 400 floor-ms	 380 floor-cpu-ms	 9.5 floor-MB
BenchmarkDeployServices/iptables/5000-2	       1	45000000000 ns/op	 120 sync-ms	 650 cp-MB
PASS
`
	rows, err := parse(strings.NewReader(in))
	if err != nil || len(rows) != 2 {
		t.Fatalf("parse: %d rows, %v", len(rows), err)
	}
	var out bytes.Buffer
	if err := write(&out, rows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	live := strings.Fields(lines[1])
	want := []string{"TraceLive/iptables/5000", "5000", "400", "380", "60.5", "iptables-save", "in", "the", "node", "400", "380", "9.5", "1.00", "1.00"}
	if strings.Join(live, " ") != strings.Join(want, " ") {
		t.Errorf("live trace row:\n got %q\nwant %q", live, want)
	}
	if !strings.Contains(lines[2], "45000") || !strings.Contains(lines[2], "120 sync-ms, 650 cp-MB") {
		t.Errorf("deploy row %q: want its wall time and its other metrics", lines[2])
	}
	if _, err := parse(strings.NewReader("BenchmarkX-2 1 12 ns/op 3\n")); err == nil {
		t.Error("a line with a value and no unit parsed")
	}
}
