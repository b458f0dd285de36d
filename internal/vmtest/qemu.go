//go:build linux

package vmtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const qemuBinary = "qemu-system-x86_64"

// qemuArgs is the VM: opts.CPUs emulated CPUs, no devices but the serial console, the kernel and initramfs given
// directly. loglevel=5 ("quiet" is 4) keeps the kernel's boot messages off the console (TCG writes each byte
// through an emulated UART) but shows warnings, among them the stack of a CPU the lockup watchdog finds
// stuck; panic=-1 with -no-reboot turns a dying init into qemu exiting instead of a hang; -display none
// rather than -nographic keeps the firmware's screen output off the serial line; cryptomgr.notests skips the
// crypto self-tests, half a second of emulated CPU at every boot.
//
// Under TCG the CPU is the baseline qemu64, which is all Go and Debian's programs need and boots no slower
// than -cpu max (whose AVX the guest would use, emulated), plus RDRAND: without it the kernel's random pool is
// not ready seconds into the boot, and anything reading crypto/rand in the guest would wait for it.
func qemuArgs(k *Kernel, opts Options, initrd, nonce string, boot int) []string {
	accel, cpu := "tcg", "qemu64,+rdrand"
	if os.Getenv(AccelEnv) == "kvm" {
		accel, cpu = "kvm", "host"
	}
	cmdline := fmt.Sprintf("console=ttyS0 loglevel=5 panic=-1 cryptomgr.notests %s=%s %s=%d", markerEnv, nonce, bootEnv, boot)
	if extra := strings.Fields(os.Getenv(KernelArgsEnv)); len(extra) > 0 {
		cmdline += " " + strings.Join(extra, " ")
	}
	return []string{
		"-accel", accel, "-cpu", cpu, "-smp", strconv.Itoa(opts.CPUs), "-m", opts.Memory,
		"-nodefaults", "-no-user-config", "-display", "none", "-serial", "stdio", "-no-reboot",
		"-kernel", k.Vmlinuz, "-initrd", initrd,
		"-append", cmdline,
	}
}

// runQEMU runs qemu to its end, passing each console line to logLine, and judges the run from the console:
// only this boot's result marker with exit 0 is a pass. It returns qemu's wall time.
func runQEMU(ctx context.Context, args []string, nonce string, logLine func(string)) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, qemuBinary, args...)
	// qemu in its own process group, killed whole on timeout, and killed if this test process dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	// A guest whose emulated CPUs are wedged never finishes: stop qemu as soon as the console says so.
	con := &console{nonce: nonce, wedged: func() { cmd.Cancel() }}
	con.read(stdout, logLine)
	waitErr := cmd.Wait()
	took := time.Since(start)
	if msg := strings.TrimSpace(stderr.String()); msg != "" {
		logLine("qemu: " + msg)
	}
	return took, con.verdict(ctx, waitErr, took)
}

// console follows the guest's serial output.
type console struct {
	nonce   string
	tail    []string // the last lines, for error messages
	result  bool     // the result marker was seen
	exit    int      // and the exit code it gave
	noTests bool     // the guest's go test warned that no test matched
	// stuck is the longest soft lockup the guest kernel reported, in seconds; wedged is called once when it
	// reaches wedgedAfter.
	stuck  int
	wedged func()
}

// softLockup is the guest kernel's soft-lockup watchdog line: a CPU that ran kernel code for N seconds without
// scheduling.
var softLockup = regexp.MustCompile(`watchdog: BUG: soft lockup - CPU#[0-9]+ stuck for ([0-9]+)s!`)

// wedgedAfter is how long a soft lockup lasts before the run is given up as wedged. Seen here under TCG
// (qemu 7.2, two emulated CPUs, Debian's 6.1 kernel, in about one run in three): both CPUs stuck in
// kernel code at once, reported every 28 s for as long as the run was let go (574 s, never recovering), and
// the next boot of the same test passed. A minute is three reports: far past a slow moment of a starved host.
const wedgedAfter = 60

// ErrWedged is a run given up because the guest kernel reported a CPU stuck for wedgedAfter seconds.
var ErrWedged = errors.New("the guest's emulated CPUs wedged")

const tailLines = 40

func (c *console) read(r io.Reader, logLine func(string)) {
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if line = printable(line); line != "" {
			c.line(line)
			logLine(line)
		}
		if err != nil {
			return
		}
	}
}

// printable drops terminal escape sequences (firmware clears the screen) and other control characters.
func printable(line string) string {
	var b strings.Builder
	for i := 0; i < len(line); i++ {
		switch ch := line[i]; {
		case ch == 0x1b:
			i += escapeLen(line[i:]) - 1
		case ch >= 0x20 && ch != 0x7f || ch == '\t' || ch >= 0x80:
			b.WriteByte(ch)
		}
	}
	return strings.TrimRight(b.String(), " ")
}

// escapeLen is the length of the escape sequence s starts with: ESC [ params final-byte, or ESC and one byte.
func escapeLen(s string) int {
	if len(s) < 2 {
		return len(s)
	}
	if s[1] != '[' {
		return 2
	}
	for i := 2; i < len(s); i++ {
		if s[i] >= 0x40 && s[i] <= 0x7e {
			return i + 1
		}
	}
	return len(s)
}

func (c *console) line(line string) {
	c.tail = append(c.tail, line)
	if len(c.tail) > tailLines {
		c.tail = c.tail[1:]
	}
	if m := softLockup.FindStringSubmatch(line); m != nil {
		secs, _ := strconv.Atoi(m[1])
		if secs >= wedgedAfter && c.stuck < wedgedAfter && c.wedged != nil {
			c.wedged()
		}
		c.stuck = max(c.stuck, secs)
	}
	if strings.Contains(line, "testing: warning: no tests to run") {
		c.noTests = true
	}
	// Contains, not HasPrefix: a kernel message can land on the same console line.
	marker := resultPrefix + " " + c.nonce + " exit="
	if i := strings.Index(line, marker); i >= 0 {
		rest := strings.Fields(line[i+len(marker):])
		if len(rest) > 0 {
			if code, err := strconv.Atoi(rest[0]); err == nil {
				c.result, c.exit = true, code
			}
		}
	}
}

func (c *console) verdict(ctx context.Context, waitErr error, took time.Duration) error {
	tail := "the console was silent"
	if len(c.tail) > 0 {
		tail = "console tail:\n\t" + strings.Join(c.tail, "\n\t")
	}
	switch {
	case c.stuck >= wedgedAfter && !c.result:
		return fmt.Errorf("%w: the kernel reported a CPU stuck for %d s, and the run was stopped; %s", ErrWedged, c.stuck, tail)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("the VM did not finish in %s and was killed; %s", took.Round(time.Second), tail)
	case ctx.Err() != nil:
		return fmt.Errorf("the VM was stopped: %w", ctx.Err())
	case !c.result:
		return fmt.Errorf("the guest died without a result (qemu: %v); %s", exitText(waitErr), tail)
	case c.exit == exitSetup:
		return fmt.Errorf("the guest could not set up or start its tests (exit %d); %s", c.exit, tail)
	case c.exit != 0:
		return fmt.Errorf("the guest's tests failed (exit %d)", c.exit)
	case c.noTests:
		return errors.New("the guest ran no tests: check the -test.run in Options.Args")
	case waitErr != nil:
		return fmt.Errorf("qemu failed after the guest's tests passed: %v", waitErr)
	}
	return nil
}

func exitText(err error) string {
	if err == nil {
		return "exited 0"
	}
	return err.Error()
}
