package netns

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/k8sguide/k8sguide/lab/state"
)

// A node's long-running processes (its control plane, its proxy, its pods' servers) outlive the agent that
// started them, as containers outlive a kubelet restart: they are started without a parent-death signal, and
// when the agent dies they are reparented to the node's init (nodeinit_linux.go, a child subreaper), which reaps
// them and writes down how each ended. The agent that comes back adopts them from the records below instead of
// starting them again, and watches them through a pidfd since they are no longer its children.

// ProcRecord is a supervised process as its agent started it. Start is the process's start time (field 22 of
// /proc/PID/stat, in clock ticks since boot): with the pid it names one process for good, where a pid alone may
// be reused by another once the first is gone.
type ProcRecord struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
	// IP is a pod server's pod address.
	IP string `json:"ip,omitempty"`
}

// ProcDir holds the records of a lab's supervised processes and the exit codes its nodes' inits reaped.
func ProcDir(store state.Store, labName string) string {
	return filepath.Join(store.Dir(labName), "procs")
}

func ProcRecordPath(store state.Store, labName, key string) string {
	return filepath.Join(ProcDir(store, labName), key+".json")
}

// ExitRecordPath is where a node's init writes the exit code of an orphan it reaped.
func ExitRecordPath(store state.Store, labName string, pid int) string {
	return filepath.Join(ProcDir(store, labName), "exit-"+strconv.Itoa(pid))
}

// startTime is the start time of pid (0: no such process).
func startTime(pid int) uint64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name (which may hold spaces and parentheses) start at its last ')'.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(s[i+1:])
	// fields[0] is field 3 (state); the start time is field 22.
	if len(fields) < 20 {
		return 0
	}
	t, _ := strconv.ParseUint(fields[19], 10, 64)
	return t
}

// WriteProcRecord records a process just started.
func WriteProcRecord(path string, pid int, ip string) error {
	rec := ProcRecord{PID: pid, Start: startTime(pid), IP: ip}
	if rec.Start == 0 {
		return fmt.Errorf("process %d is gone", pid)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return WriteJSON(path, rec)
}

// WriteJSON writes v as JSON to path through a temporary file renamed into place: a reader (another process
// of the lab) sees the old file or the new one, never half of one.
func WriteJSON(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path+".tmp", data, 0o600); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// readJSON reads what WriteJSON wrote into v, and says whether there was such a file, whole.
func readJSON(path string, v any) bool {
	data, err := os.ReadFile(path)
	return err == nil && json.Unmarshal(data, v) == nil
}

// LiveRecord reads a record and says whether the process it names still runs (the same process: its start time
// matches, and it is not a zombie).
func LiveRecord(path string) (ProcRecord, bool) {
	var rec ProcRecord
	if !readJSON(path, &rec) || rec.PID <= 0 {
		return ProcRecord{}, false
	}
	return rec, startTime(rec.PID) == rec.Start && processAlive(rec.PID)
}

// livePID is the pid of the process a record names while it runs, else 0.
func livePID(path string) int {
	if rec, ok := LiveRecord(path); ok {
		return rec.PID
	}
	return 0
}

// ProcStatus is what a supervising agent tells commands about a process it restarts.
type ProcStatus struct {
	Restarts int    `json:"restarts"`
	LastExit string `json:"lastExit,omitempty"`
	// LastLog is the last line of the process's log when it exited: its reason, in one line.
	LastLog   string     `json:"lastLog,omitempty"`
	RestartAt *time.Time `json:"restartAt,omitempty"`
}

func ProcStatusPath(recordPath string) string {
	return strings.TrimSuffix(recordPath, ".json") + ".status"
}

func ReadProcStatus(recordPath string) (ProcStatus, bool) {
	var s ProcStatus
	return s, readJSON(ProcStatusPath(recordPath), &s)
}

// diskFree is the space left, in bytes, on the filesystem holding dir (-1: unknown).
func diskFree(dir string) int64 {
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil {
		return -1
	}
	return int64(st.Bavail) * st.Bsize
}

// minFreeDisk is the space below which a lab's control plane cannot run: etcd preallocates its 64 MB write-ahead
// log segments and panics ("no space left on device") when it cannot.
const minFreeDisk = 64 << 20

// diskProblem names a full disk under the lab's state ("" when there is room).
func diskProblem(dir string) string {
	if free := diskFree(dir); free >= 0 && free < minFreeDisk {
		return fmt.Sprintf("the disk holding the lab's state (%s) is full: %d MB free, and etcd needs %d MB", dir, free>>20, minFreeDisk>>20)
	}
	return ""
}

// exitUnknown is the exit code of an adopted process whose end no init wrote down (the kubelet reports a
// container it lost track of as 137, ContainerStatusUnknown).
const exitUnknown = 137

// WatchExit returns a channel that receives pid's exit code once it exits. pid is not this process's child
// (an adopted process): the kernel's pidfd says when it ends, and the node's init, which reaps it, what its code
// was. start guards against a pid reused since the record was written.
func WatchExit(store state.Store, labName string, pid int, start uint64) (<-chan int, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("watching process %d: %w", pid, err)
	}
	if startTime(pid) != start {
		unix.Close(fd)
		return nil, fmt.Errorf("process %d is no longer the one recorded", pid)
	}
	exited := make(chan int, 1)
	go func() {
		defer unix.Close(fd)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err == nil || !errors.Is(err, unix.EINTR) {
				break
			}
		}
		exited <- readExit(store, labName, pid)
	}()
	return exited, nil
}

// readExit waits briefly for the init's record of pid's exit code (the pidfd reports the exit before the init
// has reaped it) and consumes it.
func readExit(store state.Store, labName string, pid int) int {
	path := ExitRecordPath(store, labName, pid)
	for deadline := time.Now().Add(2 * time.Second); ; {
		if data, err := os.ReadFile(path); err == nil {
			os.Remove(path)
			if code, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
				return code
			}
			return exitUnknown
		}
		if time.Now().After(deadline) {
			return exitUnknown
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// CrashBackoff paces the restarts of a process that keeps exiting: first after first, then initial doubling to
// max; a process that ran for idle starts the count again.
type CrashBackoff struct {
	first, initial, max, idle time.Duration
	next                      time.Duration
	started                   bool
}

// The kubelet's container restart back-off (the control plane's static pods, the proxy's pod, pods): the
// first restart at once, then 10 s doubling to 5 min, forgotten after 10 min of running.
func ContainerBackoff() *CrashBackoff {
	return &CrashBackoff{first: 0, initial: restartBackoff, max: restartBackoffMax, idle: restartBackoffIdle}
}

// AgentBackoff is the node agent's, restarted by its node's init as systemd restarts kind's kubelet
// (RestartSec=1s), doubling while it keeps failing so that an agent that cannot start does not spin.
func AgentBackoff() *CrashBackoff {
	return &CrashBackoff{first: time.Second, initial: 2 * time.Second, max: restartBackoffMax, idle: restartBackoffIdle}
}

// Delay is how long to wait before the next start, for a process that ran for ran.
func (b *CrashBackoff) Delay(ran time.Duration) time.Duration {
	if ran >= b.idle || !b.started {
		b.started = true
		b.next = b.initial
		return b.first
	}
	d := b.next
	b.next = min(2*b.next, b.max)
	return d
}
