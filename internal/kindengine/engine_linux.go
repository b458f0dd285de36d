package kindengine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Start starts the engine called name with the runtime wrapper at runcwrap (see runcwrap/), records it and
// returns it. An engine of that name already running is returned as it is.
func Start(ctx context.Context, name, runcwrap string) (_ *Engine, err error) {
	dir := filepath.Join("/run", name)
	if old, lerr := Load(filepath.Join(dir, "engine.json")); lerr == nil && old.running() {
		return old, nil
	}
	for _, tool := range []string{"dockerd", "ip", "docker"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("no %s on PATH (apt-get install docker.io iproute2)", tool)
		}
	}
	e := &Engine{
		Name:    name,
		NetNS:   name,
		Dir:     dir,
		DataDir: filepath.Join("/var/lib", name),
		Host:    "unix://" + filepath.Join(dir, "docker.sock"),
		Sysctls: map[string]string{},
	}
	// What is left of an engine that did not stop cleanly goes first.
	if err := e.Stop(); err != nil {
		return nil, fmt.Errorf("removing what an earlier engine left: %w", err)
	}
	defer func() {
		if err != nil {
			e.Stop()
		}
	}()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		return nil, err
	}
	for _, s := range kubeletSysctls {
		if v, err := os.ReadFile(filepath.Join("/proc/sys", s)); err == nil {
			e.Sysctls[s] = strings.TrimSpace(string(v))
		}
	}
	if _, err := os.Stat("/lib/modules"); errors.Is(err, os.ErrNotExist) {
		// kind mounts /lib/modules into every node, and docker makes the directory when it is missing: make
		// it here, so that Stop knows to remove it.
		if err := os.Mkdir("/lib/modules", 0o755); err != nil {
			return nil, err
		}
		e.MadeModules = true
	}
	wrapper := filepath.Join(dir, "bin", "runcwrap")
	if err := copyFile(runcwrap, wrapper); err != nil {
		return nil, err
	}
	if err := e.save(); err != nil {
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, "ip", "netns", "add", e.NetNS).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %v: %s", e.NetNS, err, bytes.TrimSpace(out))
	}
	if out, err := exec.CommandContext(ctx, "ip", "-n", e.NetNS, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip -n %s link set lo up: %v: %s", e.NetNS, err, bytes.TrimSpace(out))
	}
	config := filepath.Join(dir, "daemon.json")
	if err := os.WriteFile(config, []byte("{}\n"), 0o644); err != nil {
		return nil, err
	}
	log, err := os.Create(e.LogFile())
	if err != nil {
		return nil, err
	}
	defer log.Close()
	runc, err := RealRunc()
	if err != nil {
		return nil, err
	}
	argv := e.Command("dockerd",
		"--host", e.Host,
		"--config-file", config,
		"--data-root", e.DataDir,
		"--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", filepath.Join(dir, "docker.pid"),
		// kind needs none of docker's own rules: its nodes talk on a bridge, and the host reaches them there.
		"--iptables=false", "--ip6tables=false", "--ip-forward=false", "--ip-masq=false", "--bridge=none",
		"--storage-driver", "overlay2",
		// Networks from 172.18.0.0/16 only: the one kind makes gets it every time, as it does on a host whose
		// docker0 holds 172.17.0.0/16 (the nodes at 172.18.0.2... as in the guide and the netns lab).
		"--default-address-pool", "base=172.18.0.0/16,size=16",
		"--add-runtime", "runcwrap="+wrapper, "--default-runtime", "runcwrap",
	)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), RuncEnv+"="+runc)
	// Its own session: the engine outlives the command that started it, and a Ctrl-C there does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	e.PID = cmd.Process.Pid
	cmd.Process.Release()
	if err := e.save(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := e.answers(ctx); err == nil {
			break
		} else if !e.running() || time.Now().After(deadline) {
			return nil, fmt.Errorf("the engine did not answer (%v); its log: %s: %s", err, e.LogFile(), lastLines(e.LogFile(), 1))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
	return e, nil
}

// answers says whether `docker info` answers on the engine's socket.
func (e *Engine) answers(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}")
	cmd.Env = append(os.Environ(), e.Env()...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, firstLine(string(out)))
	}
	return nil
}

// running says whether the engine's process is alive.
func (e *Engine) running() bool {
	if e.PID <= 0 {
		return false
	}
	// A zombie is not running: it is our own child that has not been waited for.
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", e.PID))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

// Stop removes everything the engine made: its containers, networks and volumes (kind clusters included), the
// engine, every process left in its namespace, the namespace, its directories, /lib/modules when Start made it,
// and the host-wide settings kubelets changed, put back as they were.
func (e *Engine) Stop() error {
	var errs []error
	if e.running() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		// Containers first, while the engine can still remove them cleanly (their mounts, their networks).
		if ids, err := e.docker(ctx, "ps", "-aq"); err == nil && len(ids) > 0 {
			if _, err := e.docker(ctx, append([]string{"rm", "-f", "-v"}, ids...)...); err != nil {
				errs = append(errs, err)
			}
		}
		e.docker(ctx, "network", "prune", "-f")
		e.docker(ctx, "volume", "prune", "-f")
		cancel()
		syscall.Kill(e.PID, syscall.SIGTERM)
		for i := 0; i < 150 && e.running(); i++ {
			time.Sleep(200 * time.Millisecond)
		}
		if e.running() {
			syscall.Kill(e.PID, syscall.SIGKILL)
		}
	}
	// Whatever still runs in the namespace (a shim, docker-proxy) goes with it.
	if out, err := exec.Command("ip", "netns", "pids", e.NetNS).Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(200 * time.Millisecond)
		if out, err := exec.Command("ip", "netns", "del", e.NetNS).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip netns del %s: %v: %s", e.NetNS, err, bytes.TrimSpace(out)))
		}
	}
	for _, d := range []string{e.DataDir, filepath.Join(e.Dir, "exec")} {
		unmountUnder(d)
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	if e.MadeModules {
		if err := os.Remove("/lib/modules"); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	for s, v := range e.Sysctls {
		if cur, err := os.ReadFile(filepath.Join("/proc/sys", s)); err == nil && strings.TrimSpace(string(cur)) != v {
			if err := os.WriteFile(filepath.Join("/proc/sys", s), []byte(v), 0o644); err != nil {
				errs = append(errs, fmt.Errorf("putting %s back to %s: %w", s, v, err))
			}
		}
	}
	if err := os.RemoveAll(e.Dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (e *Engine) docker(ctx context.Context, args ...string) ([]string, error) {
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Env = append(os.Environ(), e.Env()...)
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("docker %s: %w", strings.Join(args, " "), err)
	}
	return strings.Fields(string(out)), nil
}

// unmountUnder lazily unmounts every mount at or below dir, deepest first (a container's overlay, a shm).
func unmountUnder(dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		syscall.Unmount(points[i], syscall.MNT_DETACH)
	}
}

func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o755)
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func lastLines(file string, n int) string {
	data, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
