package netns

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/k8sguide/k8sguide/lab/state"
)

// An ebpf lab's cgroups: Cilium attaches its socket LB (bpf_sock) to a cgroup v2 and it applies to every socket
// made by a process in that cgroup or below. A node of the lab gets a cgroup of its own, k8sguide/LAB/NODE in the
// cgroup v2 hierarchy, and every process of the node runs in it (its agent, and through it the proxy, the control
// plane and the pod servers; `exec` and the connections k8sguide makes from the node): the socket LB of one node
// then sees that node's sockets and nothing of the host's, or of another node's or lab's. The hierarchy is mounted
// once more in the lab's directory, as Cilium mounts it at /run/cilium/cgroupv2: a node's processes run under `ip
// netns exec`, which remounts /sys and hides the host's mount of it.

// cgroupParent is the directory of the hierarchy that holds the labs' cgroups.
const cgroupParent = "k8sguide"

// checkCgroup2 tells whether the kernel has a cgroup v2 hierarchy to attach the socket LB to.
func checkCgroup2() error {
	data, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return fmt.Errorf("reading /proc/filesystems: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[len(f)-1] == "cgroup2" {
			return nil
		}
	}
	return errors.New("the kernel has no cgroup v2, which the ebpf dataplane attaches Cilium's socket load balancer to: use a kernel with CONFIG_CGROUPS (4.5+), or another --dataplane")
}

// CgroupMount is where the lab mounts the cgroup v2 hierarchy.
func CgroupMount(store state.Store, labName string) string {
	return filepath.Join(store.Dir(labName), "cgroup2")
}

// labCgroup is the cgroup directory of lab labName, through the lab's mount.
func labCgroup(store state.Store, labName string) string {
	return filepath.Join(CgroupMount(store, labName), cgroupParent, labName)
}

// nodeCgroup is a node's cgroup in the lab's.
func nodeCgroup(labCg, node string) string { return filepath.Join(labCg, node) }

// makeCgroups mounts the hierarchy in the lab's directory and makes the lab's cgroup and one per node.
func makeCgroups(store state.Store, labName string, nodes []string) error {
	mnt := CgroupMount(store, labName)
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return err
	}
	if err := unix.Mount("none", mnt, "cgroup2", 0, ""); err != nil {
		return fmt.Errorf("mounting the cgroup v2 hierarchy on %s: %w", mnt, err)
	}
	for _, n := range nodes {
		if err := os.MkdirAll(nodeCgroup(labCgroup(store, labName), n), 0o755); err != nil {
			return fmt.Errorf("making the cgroup of %s: %w", n, err)
		}
	}
	return nil
}

// inCgroup makes a command start in the cgroup dir (clone3's CLONE_INTO_CGROUP, so that not even its first
// instruction runs outside it). The returned function closes the directory once the command has started.
func inCgroup(attr *syscall.SysProcAttr, dir string) (func(), error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("the cgroup %s: %w", dir, err)
	}
	attr.UseCgroupFD, attr.CgroupFD = true, fd
	return func() { unix.Close(fd) }, nil
}

// removeCgroups removes the lab's cgroups once their processes are gone (a cgroup with a process, or one just
// killed and not yet reaped, cannot be removed: tried for a few seconds), then k8sguide's parent if no other
// lab has one, then the lab's mount of the hierarchy. The programs attached to a node's cgroup go with it.
func removeCgroups(store state.Store, labName string) error {
	mnt := CgroupMount(store, labName)
	mounted, err := mountedAs(mnt, unix.CGROUP2_SUPER_MAGIC)
	if err != nil {
		return err
	}
	if !mounted {
		return os.RemoveAll(mnt) // made, never mounted: an empty directory (or gone already)
	}
	labCg := labCgroup(store, labName)
	var errs []error
	entries, err := os.ReadDir(labCg)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, e := range entries {
		if e.IsDir() {
			errs = append(errs, rmdirCgroup(filepath.Join(labCg, e.Name())))
		}
	}
	errs = append(errs, rmdirCgroup(labCg))
	// The parent stays while another lab uses it.
	if err := unix.Rmdir(filepath.Dir(labCg)); err != nil && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.ENOENT) {
		errs = append(errs, fmt.Errorf("removing %s: %w", filepath.Dir(labCg), err))
	}
	if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
		errs = append(errs, fmt.Errorf("unmounting %s: %w", mnt, err))
	} else if err := os.Remove(mnt); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func rmdirCgroup(dir string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := unix.Rmdir(dir)
		switch {
		case err == nil, errors.Is(err, unix.ENOENT):
			return nil
		case errors.Is(err, unix.EBUSY) && time.Now().Before(deadline):
			time.Sleep(50 * time.Millisecond)
		default:
			procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			return fmt.Errorf("removing the cgroup %s: %w (processes: %s)", dir, err, strings.Join(strings.Fields(string(procs)), " "))
		}
	}
}
