package netns_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/ipvs"
	"github.com/k8sguide/k8sguide/internal/e2etest"
	"github.com/k8sguide/k8sguide/lab/doctor"
)

// doctorRun runs `k8sguide doctor ARGS -o json` and returns its report, its stderr and its exit code.
func doctorRun(t *testing.T, cmd *exec.Cmd) (doctor.Report, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var r doctor.Report
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("doctor -o json: %v\n%s\n%s", err, stdout.Bytes(), stderr.Bytes())
	}
	return r, stderr.String(), code
}

// TestDoctor runs doctor on this host as a user would: as root every check passes but what this kernel really
// lacks (IPVS, where /proc/net/ip_vs is missing), the kernel probes loaded rules like kube-proxy's and left no
// namespace; without a new enough clang, or as nobody, the check that says so fails, with its fix, and the
// exit status is 1.
func TestDoctor(t *testing.T) {
	needRoot(t, "iptables-restore", "nft")
	e2etest.NeedAgent(t) // beside the Binary, as make build puts it
	r, stderr, code := doctorRun(t, exec.Command(e2etest.Binary, "doctor", "--provider", "netns", "-o", "json"))
	noIPVS := ipvs.CheckKernel() != nil
	failed := 0
	probed := map[string]bool{}
	for _, c := range r.Checks {
		t.Logf("%-15s %-20s %-4s %s", c.For, c.Name, c.Status, c.Found)
		if c.Status == doctor.Fail {
			failed++
			if !(noIPVS && c.For == "netns/ipvs" && strings.Contains(c.Name, "ip_vs")) {
				t.Errorf("check %s %q failed on this host: %s (%s)", c.For, c.Name, c.Found, c.Fix)
			}
		}
		if strings.HasSuffix(c.Name, " rules") || c.Name == "veth and bridge" {
			probed[c.For+" "+c.Name] = c.Status == doctor.Pass
		}
	}
	for _, want := range []string{"netns veth and bridge", "netns/iptables iptables rules", "netns/nftables nftables rules"} {
		if !probed[want] {
			t.Errorf("probe %q did not pass (probes: %v)", want, probed)
		}
	}
	if (failed > 0) != (code == 1) || (failed > 0 && !strings.Contains(stderr, "checks failed")) {
		t.Errorf("%d checks failed, exit status %d, stderr %q", failed, code, stderr)
	}
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), "k8sguide-doctor-") {
		t.Errorf("doctor left its namespace: %s", out)
	}

	// Without clang >= 18.1: the ebpf dataplane's check fails and says what to install.
	cmd := exec.Command(e2etest.Binary, "doctor", "--provider", "netns", "--dataplane", "ebpf", "--quick", "-o", "json")
	cmd.Env = append(os.Environ(), "PATH="+oldClangPath(t))
	r, _, code = doctorRun(t, cmd)
	if f := r.Failed(); len(f) != 1 || f[0].Name != "clang >= 18.1" || !strings.Contains(f[0].Found, "clang-19") || code != 1 {
		t.Errorf("doctor with clang 14 only: exit %d, failed %+v", code, f)
	}

	// As nobody: root fails, with the way to get it; nothing else needs root to be read.
	cmd = exec.Command(e2etest.Binary, "doctor", "--provider", "netns", "--dataplane", "iptables", "-o", "json")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	r, _, code = doctorRun(t, cmd)
	if f := r.Failed(); len(f) != 1 || f[0].Name != "root" || !strings.Contains(f[0].Found, "sudo") || code != 1 {
		t.Errorf("doctor as nobody: exit %d, failed %+v", code, f)
	}
	// And --fix, which would change a host setting, is refused in one line.
	cmd = exec.Command(e2etest.Binary, "doctor", "--fix")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := cmd.CombinedOutput(); err == nil || strings.Count(string(out), "\n") != 1 || !strings.Contains(string(out), "root") {
		t.Errorf("doctor --fix as nobody: %v %q", err, out)
	}
}
