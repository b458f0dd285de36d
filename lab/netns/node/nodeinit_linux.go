package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/k8sguide/k8sguide/lab/netns"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/k8sguide/k8sguide/lab/nodecmd"
	"github.com/k8sguide/k8sguide/lab/state"
)

// A netns node's init: what PID 1 of a kind node's container (systemd) is to its kubelet. `up` starts it
// detached in the node's namespace; it starts the node's agent and starts it again whenever it dies, backed off
// (netns.AgentBackoff), and, as a child subreaper, adopts and reaps whatever the agent started (the control plane, the
// proxy, the pods' servers), which so outlive an agent that was killed and are taken over by the next one. It
// does nothing else, so that there is little in it to fail.

// RunNodeInit is `internal node-init`: it runs the node's agent until ctx ends (SIGTERM), then stops it.
// apiListenerFD is the host's apiserver socket, handed on to every agent it starts, or -1.
func RunNodeInit(ctx context.Context, store state.Store, exe, labName, node string, apiListenerFD int) error {
	logger := klog.FromContext(ctx).WithValues("node", node)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("becoming the node's subreaper: %w", err)
	}
	var files []*os.File
	if apiListenerFD >= 0 {
		// Handed to each agent explicitly (as descriptor 3), and to nothing else the init may start.
		unix.CloseOnExec(apiListenerFD)
		files = []*os.File{os.NewFile(uintptr(apiListenerFD), "apiserver")}
	}
	argv := nodecmd.NodeAgentArgv(exe, labName, node, apiListenerFD >= 0)
	statusPath := netns.InitStatusPath(store, labName, node)
	logPath := filepath.Join(store.Dir(labName), "agent-"+node+".log")
	if err := os.MkdirAll(netns.ProcDir(store, labName), 0o700); err != nil {
		return err
	}

	// One goroutine reaps every child: the agent and the orphans it left. wait4(-1) and os/exec's own Wait
	// cannot share children, so the agent is started with os.StartProcess and never waited for otherwise.
	reaped := make(chan reapedChild, 16)
	go reapChildren(reaped)

	var status netns.InitStatus
	backoff := netns.AgentBackoff()
	for {
		pid, err := startAgent(argv, logPath, files)
		if err != nil {
			return err
		}
		began := time.Now()
		status.AgentPID, status.RestartAt = pid, nil
		netns.WriteJSON(statusPath, status)
		logger.Info("agent started", "pid", pid)
		var how string
	wait:
		for {
			select {
			case <-ctx.Done():
				syscall.Kill(pid, syscall.SIGTERM)
				for c := range reaped {
					if c.pid == pid {
						break
					}
				}
				return nil
			case c := <-reaped:
				if c.pid != pid {
					// An orphan: what the agent started, left when it died. Its next agent watches it and
					// learns its code here.
					os.WriteFile(netns.ExitRecordPath(store, labName, c.pid), []byte(strconv.Itoa(c.code)), 0o600)
					continue
				}
				how = c.how
				break wait
			}
		}
		d := backoff.Delay(time.Since(began))
		at := time.Now().Add(d)
		status.AgentPID, status.Restarts, status.LastExit, status.RestartAt = 0, status.Restarts+1, how, &at
		netns.WriteJSON(statusPath, status)
		logger.Info("agent exited; starting it again", "how", how, "after", d)
		timer := time.NewTimer(d)
	sleep:
		for {
			select {
			case <-ctx.Done():
				timer.Stop()
				return nil
			case c := <-reaped:
				os.WriteFile(netns.ExitRecordPath(store, labName, c.pid), []byte(strconv.Itoa(c.code)), 0o600)
			case <-timer.C:
				break sleep
			}
		}
	}
}

type reapedChild struct {
	pid, code int
	how       string
}

// reapChildren reaps every child of this process, for ever, and reports each.
func reapChildren(out chan<- reapedChild) {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			// No child right now (between two agents): look again shortly.
			time.Sleep(50 * time.Millisecond)
			continue
		}
		c := reapedChild{pid: pid, code: ws.ExitStatus(), how: "exit status " + strconv.Itoa(ws.ExitStatus())}
		if ws.Signaled() {
			c.code, c.how = 128+int(ws.Signal()), "signal: "+ws.Signal().String()
		}
		out <- c
	}
}

// startAgent starts the agent with its output appended to logPath and files as descriptors 3, ...
func startAgent(argv []string, logPath string, files []*os.File) (int, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return 0, err
	}
	defer devnull.Close()
	proc, err := os.StartProcess(argv[0], argv, &os.ProcAttr{Files: append([]*os.File{devnull, logf, logf}, files...)})
	if err != nil {
		return 0, fmt.Errorf("starting the node agent: %w", err)
	}
	pid := proc.Pid
	proc.Release() // reaped by reapChildren
	return pid, nil
}
