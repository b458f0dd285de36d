package doctor

import (
	"strings"
	"testing"
)

// TestInotifyCheck: the verdict follows the labs that still fit (16 instances each): none is a fail naming the
// error kube-proxy would hit, one or two a warning, three or more a pass; each warn or fail says how to raise it.
func TestInotifyCheck(t *testing.T) {
	for _, tc := range []struct {
		max, used int
		want      Status
		room      string
	}{
		{128, 13, Pass, "room for 7 more"},
		{128, 80, Pass, "room for 3 more"},
		{128, 90, Warn, "room for 2 more"},
		{128, 100, Warn, "room for 1 more"},
		{128, 113, Fail, "room for 0 more"},
		{128, 140, Fail, "room for 0 more"},
	} {
		c := InotifyCheck("netns", Inotify{MaxInstances: tc.max, Instances: tc.used}, InotifyPerLab)
		if want := tc.want; c.Status != want || !strings.Contains(c.Found, tc.room) {
			t.Errorf("%d of %d used: %s %q, want %s and %q", tc.used, tc.max, c.Status, c.Found, tc.want, tc.room)
		}
		if (c.Status == Pass) != (c.Fix == "") {
			t.Errorf("%d of %d used: %s with fix %q", tc.used, tc.max, c.Status, c.Fix)
		}
		if c.Status == Fail && (!strings.Contains(c.Fix, "too many open files") || !strings.Contains(c.Fix, "--fix")) {
			t.Errorf("fail's fix %q does not name both the error and --fix", c.Fix)
		}
	}
	// Not root: root's processes cannot be read, so what they hold is unknown, not 0 (as nobody, doctor said
	// "0 of 128 in use, room for 8 more" beside a lab holding 16).
	c := InotifyCheck("netns", Inotify{MaxInstances: 128, Instances: 0, Unreadable: 40}, InotifyPerLab)
	if c.Status != Warn || !strings.Contains(c.Found, "unknown") || strings.Contains(c.Found, "room for") {
		t.Errorf("with root's processes unreadable: %s %q, want a warning that the count is unknown", c.Status, c.Found)
	}
	if got := InotifyTarget(Inotify{Instances: 600}, InotifyPerLab); got != 648 {
		t.Errorf("target with 600 in use: %d, want room for three labs (648)", got)
	}
}

// TestReportErr: up's one line is the first failure, found and fix; warnings stop nothing.
func TestReportErr(t *testing.T) {
	r := Report{Checks: []Check{
		{For: "netns", Name: "a", Status: Pass, Found: "fine"},
		{For: "netns", Name: "b", Status: Warn, Found: "meh", Fix: "do x"},
		{For: "netns", Name: "c", Status: Fail, Found: "nft not found on PATH.", Fix: "install the nftables package"},
		{For: "netns", Name: "d", Status: Fail, Found: "later"},
	}}
	if err := r.Err(); err == nil || err.Error() != "nft not found on PATH: install the nftables package" {
		t.Errorf("Err() = %v", err)
	}
	if err := (Report{Checks: r.Checks[:2]}).Err(); err != nil {
		t.Errorf("a warning stopped up: %v", err)
	}
	if n := len(r.Failed()); n != 2 {
		t.Errorf("Failed: %d, want 2", n)
	}
}

// TestGrouped: checks made later for a group (the kernel probes) join it, in order.
func TestGrouped(t *testing.T) {
	in := []Check{{For: "netns", Name: "1"}, {For: "netns/iptables", Name: "2"}, {For: "netns", Name: "3"}, {For: "netns/iptables", Name: "4"}}
	var got []string
	for _, c := range Grouped(in) {
		got = append(got, c.For+":"+c.Name)
	}
	if strings.Join(got, " ") != "netns:1 netns:3 netns/iptables:2 netns/iptables:4" {
		t.Errorf("Grouped: %v", got)
	}
}
