//go:build linux

package vmtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The host and the guest agree on these. The kernel hands unknown key=value arguments of its command line
// to /init as environment, so markerEnv carries the boot's nonce; everything else is in configPath.
const (
	markerEnv    = "K8SGUIDE_VMTEST"
	bootEnv      = "K8SGUIDE_VMTEST_BOOT" // 1; 2 and on for the boots after wedged ones
	configPath   = "/vmtest.json"
	resultPrefix = "K8SGUIDE-VMTEST-RESULT"
	// exitSetup is the result when the guest could not get as far as running the tests.
	exitSetup = 125
)

// guestConfig is /vmtest.json: what the host wants the guest to do. A file rather than more kernel arguments,
// so that test arguments with spaces or quotes arrive intact.
type guestConfig struct {
	Kernel  string   `json:"kernel"`  // release: modules are under /lib/modules/<Kernel>
	Modules []string `json:"modules"` // relative to that, in load order
	Args    []string `json:"args"`    // for the guest's test binary
	// InitExits makes init exit at once, as a crashing init would: the tests of the harness check that the host
	// notices a guest that dies without a result.
	InitExits bool `json:"initExits,omitempty"`
}

// InGuest reports whether this process runs inside the harness's VM: it is the guest's init (PID 1), or the
// test process init starts, with the boot's marker in its environment.
func InGuest() bool {
	return os.Getenv(markerEnv) != "" && (os.Getpid() == 1 || os.Getppid() == 1)
}

// GuestMain is TestMain's body inside the VM, and never returns.
//
// As PID 1 it mounts /proc, /sys, /dev, /run, /tmp and /sys/fs/bpf, brings lo up, loads the modules the host
// asked for and then runs the tests in a child process: this same binary with the host's Args, which calls
// GuestMain again and so m.Run. Running them in a child means that nothing a test does (a panic in a test's
// goroutine, os.Exit, a fatal signal) can take init down with it: init always prints the result marker with
// the child's exit code, syncs and powers the VM off. Should init itself die, the kernel panics, panic=-1
// reboots, -no-reboot stops qemu and the host reports a guest that died without a result.
//
// Outside the VM (InGuest false: say a test binary that is PID 1 of a container) it only runs the tests.
func GuestMain(m *testing.M) {
	if !InGuest() || os.Getpid() != 1 {
		os.Exit(m.Run())
	}
	supervise()
}

// supervise is init's life: set up, run the tests, report, power off.
func supervise() {
	code := exitSetup
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(os.Stderr, "vmtest: init panicked: %v\n%s", r, debug.Stack())
			code = exitSetup
		}
		finish(code)
	}()
	cfg, err := readGuestConfig()
	if err == nil && cfg.InitExits {
		fmt.Println("vmtest: init exits without a result, as the host asked")
		os.Exit(0)
	}
	if err == nil {
		err = setUp(cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmtest: guest setup:", err)
		return
	}
	if os.Getenv(cpuUseEnv) != "" {
		use := startCPUUse()
		defer use.report() // before finish: deferred calls run last in first out
	}
	if code, err = runTests(cfg.Args); err != nil {
		fmt.Fprintln(os.Stderr, "vmtest: running the tests:", err)
		code = exitSetup
	}
}

func readGuestConfig() (*guestConfig, error) {
	data, err := os.ReadFile(configPath)
	if err != nil {
		return nil, err
	}
	var cfg guestConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", configPath, err)
	}
	return &cfg, nil
}

func setUp(cfg *guestConfig) error {
	if err := mountAll(); err != nil {
		return err
	}
	// IPVS refuses real servers (EINVAL) while lo is down.
	if err := loopbackUp(); err != nil {
		return fmt.Errorf("bringing lo up: %w", err)
	}
	if err := loadModules(cfg.Kernel, cfg.Modules); err != nil {
		return err
	}
	os.Setenv("PATH", guestPath)
	os.Setenv("HOME", "/root")
	pinTraceKey()
	return nil
}

// traceKeyTable is a table of the guest's own namespace that no packet passes through: its one rule sets nftrace.
const traceKeyTable = "table ip vmtest_trace_key {\n\tchain keep {\n\t\tmeta nftrace set 1\n\t}\n}\n"

// pinTraceKey turns nf_tables' tracing on for the guest's whole life, before any test runs. A rule that sets
// nftrace (`-j TRACE` of iptables-nft, which --verify adds and removes) switches the kernel's nft_trace_enabled
// static key, and the kernel patches nft_do_chain's code with int3 breakpoints to do it. Under qemu's emulation
// (TCG, 2 CPUs) that patch, with packets in nft_do_chain on the other CPU, left both CPUs stuck there: the soft
// lockups of the VM test, whose stacks show CPU 0 in asm_exc_int3 and both in nft_do_chain+0x6f, the static
// branch. With a rule holding the key from boot, later rules only count it up and down: nothing is patched.
// Without nft (a VM that runs no lab) there is nothing to pin.
func pinTraceKey() {
	nft, err := exec.LookPath("nft")
	if err != nil {
		return
	}
	cmd := exec.Command(nft, "-f", "-")
	cmd.Stdin = strings.NewReader(traceKeyTable)
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "vmtest: keeping nf_tables tracing on: %v: %s\n", err, out)
	}
}

type mountPoint struct {
	source, target, fstype string
	flags                  uintptr
	data                   string
	optional               bool
}

var guestMounts = []mountPoint{
	{"proc", "/proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, "", false},
	{"sysfs", "/sys", "sysfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, "", false},
	{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755", false},
	{"tmpfs", "/run", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=0755", false},
	{"tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777", false},
	// For eBPF code under test that pins maps; a kernel without BPF syscalls just has no such directory.
	{"bpf", "/sys/fs/bpf", "bpf", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, "mode=0700", true},
}

func mountAll() error {
	for _, m := range guestMounts {
		err := os.MkdirAll(m.target, 0o755)
		if err == nil {
			err = unix.Mount(m.source, m.target, m.fstype, m.flags, m.data)
		}
		if err != nil && !m.optional {
			return fmt.Errorf("mounting %s on %s: %w", m.fstype, m.target, err)
		}
	}
	return nil
}

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// loadModules loads module files in order with finit_module. A module that is already there (EEXIST) is fine.
func loadModules(release string, rels []string) error {
	start := time.Now()
	for _, rel := range rels {
		if err := loadModule(path.Join("/lib/modules", release, rel)); err != nil {
			return err
		}
	}
	if len(rels) > 0 {
		fmt.Printf("vmtest: loaded %d modules in %s\n", len(rels), time.Since(start).Round(time.Millisecond))
	}
	return nil
}

func loadModule(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.FinitModule(int(f.Fd()), "", 0); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("finit_module %s: %w", p, err)
	}
	return nil
}

// runTests runs this binary again as the test process and waits for it, reaping on the way any orphans the
// tests leave (init inherits them). It returns the test process's exit code, 128+signal if a signal killed it.
func runTests(args []string) (int, error) {
	pid, err := syscall.ForkExec("/init", append([]string{"/init"}, args...), &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
	})
	if err != nil {
		return 0, err
	}
	for {
		var ws syscall.WaitStatus
		wpid, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return 0, err
		}
		if wpid != pid {
			continue
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ws.ExitStatus(), nil
	}
}

// finish prints the result marker, waits for the serial line to send it, and powers the VM off.
func finish(code int) {
	fmt.Printf("\n%s %s exit=%d\n", resultPrefix, os.Getenv(markerEnv), code)
	// tcdrain: a write to the console returns before the UART has sent it, and power-off would cut it short.
	unix.IoctlSetInt(1, unix.TCSBRK, 1)
	unix.Sync()
	err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	// Still here: let the kernel panic, which with panic=-1 and qemu's -no-reboot ends the VM too.
	fmt.Fprintln(os.Stderr, "vmtest: power off:", err)
	os.Exit(code | 1)
}
