package netns

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/k8sguide/k8sguide/lab/state"
)

// TestCrashBackoff: the control plane and the proxy are restarted with the kubelet's back-off (a crashing
// control plane was started again every second, for ever), the agent as systemd restarts kind's kubelet, at
// first; both forget a crash once the process ran for 10 minutes.
func TestCrashBackoff(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    *CrashBackoff
		want []time.Duration
	}{
		{"container", ContainerBackoff(), []time.Duration{0, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 5 * time.Minute, 5 * time.Minute}},
		{"agent", AgentBackoff(), []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i, want := range tc.want {
				if got := tc.b.Delay(time.Second); got != want {
					t.Errorf("restart %d after a 1 s run: %s, want %s", i+1, got, want)
				}
			}
			if got := tc.b.Delay(restartBackoffIdle); got != tc.want[0] {
				t.Errorf("after a run of %s: %s, want %s (the count starts again)", restartBackoffIdle, got, tc.want[0])
			}
		})
	}
}

// TestProcRecords: a record names one process for good (pid and start time); a process that ended, or a pid
// reused by another process, is not taken for it; an adopted process's exit is seen through its pidfd, with
// the code its reaper wrote down.
func TestProcRecords(t *testing.T) {
	store := state.Store{Root: t.TempDir()}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	path := ProcRecordPath(store, "lab", "proc")
	if err := WriteProcRecord(path, cmd.Process.Pid, "10.244.1.2"); err != nil {
		t.Fatal(err)
	}
	rec, ok := LiveRecord(path)
	if !ok || rec.PID != cmd.Process.Pid || rec.IP != "10.244.1.2" {
		t.Fatalf("live record: %+v %v", rec, ok)
	}
	// The same pid with another start time is another process.
	stale := strings.Replace(mustRead(t, path), `"start":`, `"start":1`, 1)
	os.WriteFile(path, []byte(stale), 0o600)
	if _, ok := LiveRecord(path); ok {
		t.Error("a record whose start time differs was taken for the running process")
	}
	exited, err := WatchExit(store, "lab", rec.PID, rec.Start)
	if err != nil {
		t.Fatal(err)
	}
	// This test is the process's parent, so it reaps it; the node's init writes the code it reaped.
	os.WriteFile(ExitRecordPath(store, "lab", rec.PID), []byte("143"), 0o600)
	cmd.Process.Signal(os.Interrupt)
	cmd.Wait()
	select {
	case code := <-exited:
		if code != 143 {
			t.Errorf("exit code %d, want the reaper's 143", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the pidfd did not report the exit")
	}
	if _, err := os.Stat(ExitRecordPath(store, "lab", rec.PID)); !os.IsNotExist(err) {
		t.Errorf("the exit record was not consumed: %v", err)
	}
	if _, ok := LiveRecord(path); ok {
		t.Error("an ended process is still live")
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestKeepLogs: the logs a failed up's error names are kept where the error then says, since the rollback
// removes the lab's directory (the error pointed at a log that no longer existed).
func TestKeepLogs(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "agent-x.log")
	os.WriteFile(log, []byte("the reason\n"), 0o600)
	err := keepLogs(errors.New("the agent of node x stopped: the reason (log: "+log+")"), dir)
	var moved *movedLogsError
	if !errors.As(err, &moved) {
		t.Fatalf("%v: logs not kept", err)
	}
	defer os.RemoveAll(moved.to)
	kept := filepath.Join(moved.to, "agent-x.log")
	if !strings.Contains(err.Error(), kept) || strings.Contains(err.Error(), dir+"/") {
		t.Errorf("error %q does not name the kept log %s", err, kept)
	}
	if mustRead(t, kept) != "the reason\n" {
		t.Errorf("kept log: %q", mustRead(t, kept))
	}
	if other := errors.New("no log named"); keepLogs(other, dir) != other {
		t.Error("an error that names no log was changed")
	}
}
