// Package capability reads which Linux capabilities this machine's processes may hold. The sandboxes this
// project is tested in lack CAP_SYS_RESOURCE in every process's bounding set: the kind test engine's runtime
// wrapper (internal/kindengine) and the node image (lab/kind/nodeimage) work around that, and only there.
package capability

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// capabilityNames are the kernel's capabilities by number, as OCI specs name them (linux/capability.h).
var capabilityNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_SETGID",
	"CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST",
	"CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO",
	"CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE",
	"CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE",
	"CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM",
	"CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
}

// Missing names the capabilities the kernel has (up to /proc/sys/kernel/cap_last_cap) that this
// process's bounding set lacks: no process here can hand them to a container.
func Missing() []string {
	bounding, err := boundingSet()
	if err != nil {
		return nil
	}
	last := len(capabilityNames) - 1
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n < last {
			last = n
		}
	}
	var missing []string
	for i := 0; i <= last; i++ {
		if bounding&(1<<i) == 0 {
			missing = append(missing, capabilityNames[i])
		}
	}
	return missing
}

func boundingSet() (uint64, error) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, fmt.Errorf("/proc/self/status has no CapBnd")
}

// Has says whether this process's bounding set holds capability name (CAP_...).
func Has(name string) bool {
	for _, m := range Missing() {
		if m == name {
			return false
		}
	}
	return true
}
