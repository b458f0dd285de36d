package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// IPCmd runs iproute2's ip with argv (never through a shell) and returns its stderr as the error.
func IPCmd(ctx context.Context, args ...string) error {
	_, err := ipOutput(ctx, args...)
	return err
}

func ipOutput(ctx context.Context, args ...string) (string, error) {
	return runIP(exec.CommandContext(ctx, "ip", args...), args)
}

// ipUninterrupted runs ip to its end whatever happens to the caller: its own process group keeps a terminal's
// Ctrl-C from it, and no context kills it. For steps that must not stop half-done.
func ipUninterrupted(args ...string) error {
	cmd := exec.Command("ip", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	_, err := runIP(cmd, args)
	return err
}

func runIP(cmd *exec.Cmd, args []string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return "", fmt.Errorf("ip %s: %s", strings.Join(args, " "), msg)
	}
	return stdout.String(), nil
}

// netnsDir is where `ip netns add` pins namespaces.
const netnsDir = "/run/netns"

func nsPath(name string) string { return filepath.Join(netnsDir, name) }

// mountedAs tells whether dir holds a mount of the filesystem whose statfs magic is magic; a directory that does
// not exist holds none.
func mountedAs(dir string, magic int64) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	return st.Type == magic, nil
}

func nsExists(name string) bool {
	_, err := os.Stat(nsPath(name))
	return err == nil
}

// InNamespace runs fn on an OS thread that has entered the named network namespace. Sockets fn opens belong to
// that namespace, and /proc/sys/net opened by fn shows that namespace's sysctls. The thread returns to its own
// namespace afterwards; if it cannot, it stays locked so the runtime retires it. (Retiring alone is not enough:
// the goroutine may run on the main thread, which the runtime never retires, and the whole process would then
// count as a member of the namespace.)
func InNamespace(name string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer own.Close()
		target, err := os.Open(nsPath(name))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("namespace %s: %w", name, err)
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter namespace %s: %w", name, err)
			return
		}
		err = fn()
		if unix.Setns(int(own.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// setSysctls writes sysctls (as "net/ipv4/ip_forward" paths under /proc/sys) inside a namespace. Only
// per-namespace sysctls are written, so the root namespace is untouched.
func setSysctls(ns string, values map[string]string) error {
	return InNamespace(ns, func() error {
		for path, v := range values {
			if err := os.WriteFile(filepath.Join("/proc/sys", path), []byte(v), 0o644); err != nil {
				return fmt.Errorf("namespace %s: sysctl %s=%s: %w", ns, strings.ReplaceAll(path, "/", "."), v, err)
			}
		}
		return nil
	})
}

// startDetached starts argv inside a network namespace as a daemon: its own session, stdin from /dev/null,
// output to logPath. It enters the network namespace alone (nsenter --net), not the private mount namespace `ip
// netns exec` makes: a node's agent makes its pods' namespaces with `ip netns add`, whose bind mounts must land
// in the host's mount namespace for `down`, `exec` and `ip netns pids` to find them. nsenter execs argv in place,
// so the pid returned is the daemon's own. It starts in cgroup (a directory of the cgroup v2 hierarchy) unless
// that is "". extra are passed on as descriptors 3, 4, ...
func startDetached(ns, logPath, cgroup string, argv []string, extra ...*os.File) (int, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	cmd := exec.Command("nsenter", append([]string{"--net=" + nsPath(ns), "--"}, argv...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = extra
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if cgroup != "" {
		done, err := inCgroup(cmd.SysProcAttr, cgroup)
		if err != nil {
			return 0, err
		}
		defer done()
	}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s in %s: %w", argv[0], ns, err)
	}
	pid := cmd.Process.Pid
	exited := make(chan struct{})
	// Reap it if it dies while this command still runs; otherwise init adopts it.
	go func() { cmd.Wait(); close(exited) }()
	if err := WaitInNamespace(pid, ns, exited); err != nil {
		select {
		case <-exited: // already reaped: its pid may be someone else's by now
		default:
			syscall.Kill(pid, syscall.SIGKILL)
		}
		return 0, fmt.Errorf("start %s in %s: %w (log: %s)", argv[0], ns, err, logPath)
	}
	return pid, nil
}

// WaitInNamespace waits until pid has entered namespace ns. Until then the child is nsenter still in this
// namespace, and a teardown that lists the namespace's processes (an interrupted up) would miss it: nsenter would
// then enter the deleted namespace through the descriptor it already holds and run the daemon there, out of
// reach (a CI run left a Cilium agent behind this way).
func WaitInNamespace(pid int, ns string, exited <-chan struct{}) error {
	var want unix.Stat_t
	if err := unix.Stat(nsPath(ns), &want); err != nil {
		return err
	}
	procNet := fmt.Sprintf("/proc/%d/ns/net", pid)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var got unix.Stat_t
		if err := unix.Stat(procNet, &got); err == nil && got.Dev == want.Dev && got.Ino == want.Ino {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("it exited before entering the namespace")
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("it did not enter the namespace within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// ProcessInNamespace tells whether pid's network namespace is ns.
func ProcessInNamespace(pid int, ns string) bool {
	var want, got unix.Stat_t
	return unix.Stat(nsPath(ns), &want) == nil && unix.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &got) == nil &&
		got.Dev == want.Dev && got.Ino == want.Ino
}

// namespacePids lists the processes whose network namespace is ns.
func namespacePids(ctx context.Context, ns string) ([]int, error) {
	out, err := ipOutput(ctx, "netns", "pids", ns)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(out) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// RemoveNamespace stops every process in a namespace (TERM, then KILL) and deletes the namespace; its veths and
// bridges go with it. A namespace that does not exist is not an error.
func RemoveNamespace(ctx context.Context, ns string) error {
	if !nsExists(ns) {
		return nil
	}
	pids, err := namespacePids(ctx, ns)
	if err != nil {
		return err
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(pids) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		pids, _ = namespacePids(ctx, ns)
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	// KILL is delivered, not done: wait (briefly) until they are gone, so nothing outlives the command.
	for wait := time.Now().Add(2 * time.Second); len(pids) > 0 && time.Now().Before(wait); {
		time.Sleep(10 * time.Millisecond)
		pids, _ = namespacePids(ctx, ns)
	}
	if err := IPCmd(ctx, "netns", "del", ns); err != nil && nsExists(ns) {
		return err
	}
	return nil
}

// processAlive tells whether pid names a live (not zombie) process.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	s := string(data)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}
