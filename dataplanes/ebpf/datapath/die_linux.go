package datapath

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel SIGKILL cmd when the thread that starts it ends (the process killed, with it),
// and puts cmd in a process group of its own that a cancelled context kills whole.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	cmd.Cancel = func() error {
		if cmd.Process == nil {
			return nil
		}
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
