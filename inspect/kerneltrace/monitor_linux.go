package kerneltrace

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill the monitor when the process that started it dies: a killed
// `k8sguide internal kernel-trace` must not leave a monitor running in the node.
func dieWithParent(c *exec.Cmd) {
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
