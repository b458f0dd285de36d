package kerneltrace_test

import (
	"bufio"
	"context"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/kerneltrace"
	"github.com/k8sguide/k8sguide/internal/netnstest"
)

// killedChild marks the copy of the test binary that starts a trace and waits to be SIGKILLed.
const killedChild = "K8SGUIDE_KTRACE_KILLED_CHILD"

var orphanFlow = trace.Flow{Dst: netip.MustParseAddr("127.0.0.6"), Dport: 80, Sport: 47001, Proto: "tcp"}

// TestSIGKILLLeavesNoTable: a SIGKILLed `trace --verify` left its k8sguide-trace-* table in the node, and every
// later verify there disagreed until it was deleted by hand. The table is now owned by the nft process holding
// it, so the kernel deletes it with that process; one left by an older k8sguide (no owner) is removed by the next
// trace; a live trace's table is left alone. In a namespace of its own (k36v-PID), removed whatever happens.
func TestSIGKILLLeavesNoTable(t *testing.T) {
	switch {
	case os.Getenv(killedChild) != "":
		killedChildTrace(t)
		return
	case netnstest.Inside():
		sigkillInThisNetns(t)
		return
	}
	netnstest.Run(t, "k36v", "nft", "stdbuf")
}

func tables(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("nft", "list", "tables", "ip").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list tables: %v: %s", err, out)
	}
	var names []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if n, ok := strings.CutPrefix(l, "table ip "); ok && strings.HasPrefix(n, kerneltrace.TablePrefix) {
			names = append(names, n)
		}
	}
	return names
}

// killedChildTrace starts a trace, says READY and waits to be killed: the --verify that is SIGKILLed.
func killedChildTrace(t *testing.T) {
	if _, err := kerneltrace.Start(context.Background(), "nftables", orphanFlow); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("READY\n")
	time.Sleep(time.Minute)
}

func sigkillInThisNetns(t *testing.T) {
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// 1. A trace whose process is SIGKILLed leaves no table.
	child := exec.Command(os.Args[0], "-test.run", "^"+t.Name()+"$")
	child.Env = append(os.Environ(), killedChild+"=1")
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() && !strings.Contains(sc.Text(), "READY") {
	}
	if got := tables(t); len(got) != 1 {
		child.Process.Kill()
		child.Wait()
		t.Fatalf("while the trace runs: tables %v, want its one", got)
	}
	child.Process.Signal(syscall.SIGKILL)
	child.Wait()
	var left []string
	for range 50 { // the kernel removes it as the owner's socket closes: at once, but the owner dies just after
		if left = tables(t); len(left) == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Errorf("after SIGKILL of the tracing process: tables %v left", left)
	}

	// 2. A table an older k8sguide left (no owner) is removed by the next trace; that trace's own stays until Stop.
	legacy := orphanFlow
	legacy.Sport = 47002
	add := exec.Command("nft", "-f", "-")
	add.Stdin = strings.NewReader(kerneltrace.Ruleset(legacy))
	if out, err := add.CombinedOutput(); err != nil {
		t.Fatalf("adding an unowned table: %v: %s", err, out)
	}
	live := orphanFlow
	live.Sport = 47003
	s, err := kerneltrace.Start(context.Background(), "nftables", live)
	if err != nil {
		t.Fatal(err)
	}
	if got := tables(t); len(got) != 1 || got[0] != kerneltrace.TableName(live) {
		t.Errorf("after a new trace started: tables %v, want only %s (the unowned %s removed)", got, kerneltrace.TableName(live), kerneltrace.TableName(legacy))
	}
	// 3. Another trace's sweep keeps a live trace's table.
	if removed := kerneltrace.RemoveOrphans(context.Background()); len(removed) != 0 {
		t.Errorf("RemoveOrphans removed a live trace's table: %v", removed)
	}
	if got := tables(t); len(got) != 1 {
		t.Errorf("a live trace's table went: tables %v", got)
	}
	if _, err := s.Stop(); err != nil {
		t.Logf("stop: %v", err)
	}
	if got := tables(t); len(got) != 0 {
		t.Errorf("after Stop: tables %v left", got)
	}
}
