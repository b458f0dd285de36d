package render

import (
	"bytes"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/lab/doctor"
)

// doctorReport is a report as this machine's doctor made it (issue 38), with the inotify limit as a host at
// its limit would show it and a missing clang.
var doctorReport = doctor.Report{Checks: []doctor.Check{
	{For: "netns", Name: "root", Status: doctor.Pass, Found: "running as root"},
	doctor.InotifyCheck("netns", doctor.Inotify{MaxInstances: 128, Instances: 120}, doctor.InotifyPerLab),
	{For: "netns/iptables", Name: "iptables-restore", Status: doctor.Pass, Found: "/usr/sbin/iptables-restore"},
	{For: "netns/ebpf", Name: "clang >= 18.1", Status: doctor.Fail, Found: "no clang >= 18.1 on PATH (found: clang-14 14.0.6): install clang-19 (apt-get install clang-19)"},
	doctor.InotifyCheck("netns/x", doctor.Inotify{MaxInstances: 128, Instances: 90}, doctor.InotifyPerLab),
}}

func TestWriteDoctor(t *testing.T) {
	var b bytes.Buffer
	if err := WriteDoctor(&b, 100, doctorReport); err != nil {
		t.Fatal(err)
	}
	want := `netns
  ✓ ok    root               running as root
  ✗ FAIL  inotify instances  120 of 128 in use (fs.inotify.max_user_instances); a lab holds about
                             16: room for 0 more
                             fix: the next lab's kube-proxy would fail with "too many open files":
                                  k8sguide doctor --fix sets fs.inotify.max_user_instances=512 (put
                                  it in /etc/sysctl.d/ to keep it)

netns/iptables
  ✓ ok    iptables-restore   /usr/sbin/iptables-restore

netns/ebpf
  ✗ FAIL  clang >= 18.1      no clang >= 18.1 on PATH (found: clang-14 14.0.6): install clang-19
                             (apt-get install clang-19)

netns/x
  ! warn  inotify instances  90 of 128 in use (fs.inotify.max_user_instances); a lab holds about 16:
                             room for 2 more
                             fix: k8sguide doctor --fix sets fs.inotify.max_user_instances=512 (put
                                  it in /etc/sysctl.d/ to keep it)

2 of 5 checks failed, 1 with a warning.
`
	if b.String() != want {
		t.Errorf("WriteDoctor at 100 columns:\n%s\nwant:\n%s", b.String(), want)
	}
	for _, width := range []int{60, 80, 100} {
		b.Reset()
		WriteDoctor(&b, width, doctorReport)
		for _, line := range strings.Split(b.String(), "\n") {
			if TextWidth(line) > width {
				t.Errorf("at %d columns, a line of %d: %q", width, TextWidth(line), line)
			}
		}
	}
}
