package kerneltrace_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/k8sguide/k8sguide/inspect/kerneltrace"
	"github.com/k8sguide/k8sguide/internal/netnstest"
)

// TestRewrittenChain makes the kernel trace a packet through a chain that was flushed and refilled after the
// monitor started, as kube-proxy's nftables mode does to a Service's chains when its endpoints change, and
// checks that the event carries the new rule's text (and that a rule deleted again before it could be read
// makes the trace incomplete rather than silently shorter), in a namespace of its own.
func TestRewrittenChain(t *testing.T) {
	if netnstest.Inside() {
		rewrittenChainInThisNetns(t)
		return
	}
	netnstest.Run(t, "kgkt-rewrite", "nft", "stdbuf")
}

func rewrittenChainInThisNetns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := func(stdin string, args ...string) {
		t.Helper()
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stdin = strings.NewReader(stdin)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("", "ip", "link", "set", "lo", "up")
	run(`table ip t {
	chain out { type filter hook output priority 0; ip daddr 127.0.0.5 jump svc; }
	chain svc { ip daddr 127.0.0.5 counter; }
}
`, "nft", "-f", "-")

	f := flow
	for i, deleteAgain := range []bool{false, true} {
		f.Sport = flow.Sport - 1 + uint16(i)
		s, err := kerneltrace.Start(ctx, "nftables", f)
		if err != nil {
			t.Fatal(err)
		}
		run(`flush chain ip t svc
add rule ip t svc ip daddr 127.0.0.5 tcp dport 80 counter comment "rewritten"
`, "nft", "-f", "-")
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: int(f.Sport)}, Timeout: time.Second}
		if c, err := d.Dial("tcp", "127.0.0.5:80"); err == nil { // nothing listens: refused
			c.Close()
		}
		if deleteAgain {
			time.Sleep(500 * time.Millisecond) // let the monitor print the packet's events first
			run("flush chain ip t svc\n", "nft", "-f", "-")
		}
		lines, err := s.Stop()
		t.Logf("monitor lines:\n%s", strings.Join(lines, "\n"))
		events := kerneltrace.ParseNft(lines, f)
		var svc []string
		for _, e := range events {
			if e.Chain == "svc" {
				svc = append(svc, e.Text)
			}
		}
		if !deleteAgain {
			if err != nil {
				t.Fatal(err)
			}
			if want := `ip daddr 127.0.0.5 tcp dport 80 comment "rewritten"`; fmt.Sprint(svc) != "["+want+"]" {
				t.Errorf("svc events %q, want the rewritten rule %q", svc, want)
			}
			continue
		}
		if err == nil || !strings.HasPrefix(err.Error(), kerneltrace.Incomplete) {
			t.Errorf("rule deleted before it could be read: err = %v, want %q", err, kerneltrace.Incomplete)
		}
		if len(svc) != 1 || !strings.HasPrefix(svc[0], "unknown rule handle ") {
			t.Errorf("svc events %q, want one unknown rule, named by its handle", svc)
		}
	}
}
