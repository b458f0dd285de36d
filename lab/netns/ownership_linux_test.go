package netns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/k8sguide/k8sguide/internal/netnstest"
)

// TestAddNamespaceInterrupted: a Ctrl-C while `ip netns add` runs must not leave a namespace without its lab's
// mark, which no rollback takes for its own (CI, stop 53: `up` interrupted after 50 ms left
// e2e-int-control-plane behind, and every later `up` refused the name). A wrapper on PATH makes the add slow after
// the namespace exists, and the context is cancelled in that window: the namespace must come out marked, with
// the cancellation reported, so the rollback finds it.
func TestAddNamespaceInterrupted(t *testing.T) {
	netnstest.NeedRoot(t)
	realIP, err := exec.LookPath("ip")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	wrapper := fmt.Sprintf("#!/bin/sh\n%q \"$@\"; rc=$?\nif [ \"$1\" = netns ] && [ \"$2\" = add ]; then sleep 1; fi\nexit $rc\n", realIP)
	if err := os.WriteFile(filepath.Join(bin, "ip"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))

	ns := fmt.Sprintf("addint-%d", os.Getpid())
	const mark = "k8sguide-test-addint"
	defer exec.Command(realIP, "netns", "del", ns).Run()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	err = AddNamespace(ctx, ns, mark)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("AddNamespace cancelled during the add: %v, want %v", err, context.Canceled)
	}
	if _, statErr := os.Stat(nsPath(ns)); statErr != nil {
		t.Fatalf("the namespace is gone (%v); this test needs it to outlive the cancel to mean anything", statErr)
	}
	if got := markOf(context.Background(), ns); got != mark {
		t.Errorf("namespace %s bears mark %q after the interrupted add, want %q: the rollback would leave it", ns, got, mark)
	}
}

// TestWithoutLogs: an interrupted up's error names no log in the lab's directory, which the rollback removed.
func TestWithoutLogs(t *testing.T) {
	dir := "/run/k8sguide/labs/a.b"
	for _, tc := range []struct{ in, want string }{
		{"writing the lab's certificates: signal: killed (log: /run/k8sguide/labs/a.b/pki.log)", "writing the lab's certificates: signal: killed"},
		{"waiting for nodes: not ready after 2m0s (logs: /run/k8sguide/labs/a.b)", "waiting for nodes: not ready after 2m0s"},
		{"start x in n: boom (log: /run/k8sguide/labs/axb/x.log)", "start x in n: boom (log: /run/k8sguide/labs/axb/x.log)"},
		{"context canceled", "context canceled"},
	} {
		cause := errors.New(tc.in)
		got := withoutLogs(cause, dir)
		if got.Error() != tc.want || !errors.Is(got, cause) {
			t.Errorf("withoutLogs(%q) = %q (wraps the cause: %v), want %q", tc.in, got, errors.Is(got, cause), tc.want)
		}
	}
}
