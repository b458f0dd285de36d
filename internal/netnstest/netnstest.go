// Package netnstest runs a test in a network namespace of its own: the test binary runs itself there with
// `ip netns exec`, so that what the test does to the network (rules, addresses, sockets) stays in it.
package netnstest

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// env is set in the copy of the test binary that runs inside the namespace.
const env = "K8SGUIDE_NETNSTEST_INSIDE"

// Inside says whether this is the copy of the test binary running inside the namespace Run made.
func Inside() bool { return os.Getenv(env) != "" }

// NeedRoot skips the test without root or without ip or one of tools on PATH.
func NeedRoot(t testing.TB, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces and netfilter rules (run the tests as root, as CI does)")
	}
	for _, tool := range append([]string{"ip"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s on PATH", tool)
		}
	}
}

// Run makes a namespace named prefix-PID, runs the test binary in it for the calling test alone (which finds
// itself Inside there), logs what it printed, fails when it failed, and removes the namespace. It skips the
// test without root or without one of tools on PATH.
func Run(t *testing.T, prefix string, tools ...string) {
	t.Helper()
	NeedRoot(t, tools...)
	ns := fmt.Sprintf("%s-%d", prefix, os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	cmd := exec.Command("ip", "netns", "exec", ns, os.Args[0], "-test.run", "^"+t.Name()+"$", "-test.v")
	cmd.Env = append(os.Environ(), env+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("in %s:\n%s", ns, out)
	if err != nil {
		t.Fatalf("the test failed in its namespace: %v", err)
	}
}
