//go:build linux

// Package vmtest runs a package's own tests inside a throwaway VM: Debian's cloud kernel under QEMU, with the
// test binary itself as the guest's /init.
//
// It exists because some tests need kernel features the host's kernel lacks: the machines these tests run on
// have no IPVS and cannot load modules, so kube-proxy's IPVS mode cannot be exercised against a real kernel
// there. Debian's kernel has IPVS (and ipset, nf_tables, veth...) as modules and boots under QEMU's TCG in a
// second or two. Nothing is installed or mounted on the host: the kernel package is downloaded with apt-get
// and extracted into a cache, and the guest's root filesystem is an initramfs written from Go holding the test
// binary, the modules it asked for and the few host programs it needs with their shared libraries.
//
// A package uses it from its TestMain and one host-side test that boots the VM:
//
//	func TestMain(m *testing.M) {
//		if vmtest.InGuest() {
//			vmtest.GuestMain(m)
//		}
//		os.Exit(m.Run())
//	}
//
//	func TestIPVSInVM(t *testing.T) {
//		took := vmtest.Boot(t, vmtest.Options{Modules: []string{"ip_vs", "ip_vs_rr"},
//			Args: []string{"-test.run=^TestGuest", "-test.v"}})
//		t.Logf("VM wall time %s", took)
//	}
//
//	func TestGuestIPVS(t *testing.T) {
//		if !vmtest.InGuest() {
//			t.Skip("runs inside the IPVS test VM (TestIPVSInVM boots it)")
//		}
//		...
//	}
package vmtest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/k8sguide/k8sguide/internal/stopclean"
)

// Options for a boot.
type Options struct {
	// Modules are module names to load in the guest ("ip_vs", "ip_vs_rr", "veth", "xt_set"...). The harness
	// adds what they depend on and loads everything in dependency order; built-in ones are skipped.
	Modules []string
	// Binaries are host programs the guest needs, by name or path ("iptables-restore", "ipset", "ip"). Each is
	// put at its host path (symlinks and all) and linked into /usr/sbin, with its shared libraries and, for
	// iptables' family, every iptables extension.
	Binaries []string
	// Memory is qemu's -m; default "1024". The initramfs is unpacked into it, so it must hold the test binary.
	Memory string
	// CPUs is qemu's -smp; default 1. Under TCG each emulated CPU is a host thread (multi-threaded TCG), so a
	// guest running several busy processes at once (a lab's node proxies) gains from a second one.
	CPUs int
	// Timeout bounds the whole VM run, further boots included (a guest whose emulated CPUs wedge is booted
	// again, up to maxBoots in all); default 5 minutes.
	Timeout time.Duration
	// Args are the guest test binary's arguments, e.g. "-test.run=^TestGuest", "-test.v". Unless they set
	// -test.timeout, the guest's tests time out a little before the VM does, so a hung test dumps its
	// goroutines instead of just being killed.
	Args []string

	// initExits asks the guest's init to exit at once: the harness's own tests check the host's side of a guest
	// that dies without a result.
	initExits bool
}

// AccelEnv selects qemu's accelerator: "tcg" (the default) or "kvm". TCG is the default because /dev/kvm on
// nested cloud machines often exists without VMX/SVM behind it, and a kernel under it dies or crawls.
const AccelEnv = "K8SGUIDE_VM_ACCEL"

// KernelArgsEnv adds words to the guest kernel's command line, e.g. "loglevel=7" to see every message of the
// guest kernel on the console.
const KernelArgsEnv = "K8SGUIDE_VM_KERNEL_ARGS"

// Boot runs the calling test binary (os.Executable()) as /init in a VM and fails t if the guest's tests fail or
// the VM does not finish. It skips t when qemu-system-x86_64 is missing or no kernel can be obtained. The
// guest's console goes to t.Log line by line as it arrives. It returns the guest's wall time, from starting
// qemu to its exit at power-off.
func Boot(t testing.TB, opts Options) time.Duration {
	t.Helper()
	k := needVM(t)
	took, err := boot(t.Context(), k, opts, func(line string) { t.Log(line) })
	if err != nil {
		t.Fatalf("VM: %v", err)
	}
	return took
}

// needVM skips t unless a VM can be booted here (not already inside one, qemu installed, a kernel in the cache
// or downloadable), and returns the kernel.
func needVM(t testing.TB) *Kernel {
	t.Helper()
	if InGuest() {
		t.Skip("already inside the test VM")
	}
	if _, err := exec.LookPath(qemuBinary); err != nil {
		t.Skipf("%s not found (apt-get install --no-install-recommends qemu-system-x86): %v", qemuBinary, err)
	}
	k, err := EnsureKernel(t.Context(), "", logWriter{t})
	if err != nil {
		t.Skipf("no kernel for the test VM: %v", err)
	}
	return k
}

// logWriter sends what EnsureKernel reports to t.Log.
type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// boot is Boot without testing.TB: it returns the wall time, and an error when the guest's tests did not pass.
func boot(ctx context.Context, k *Kernel, opts Options, logLine func(string)) (time.Duration, error) {
	opts = withDefaults(opts)
	dir, err := os.MkdirTemp("", "vmtest-")
	if err != nil {
		return 0, err
	}
	stopclean.Remove(dir) // the initramfs is 370 MB; qemu dies with this process (Pdeathsig)
	defer func() {
		os.RemoveAll(dir)
		stopclean.Forget(dir)
	}()
	nonce := newNonce()
	initrd := filepath.Join(dir, "initramfs.cpio")
	start := time.Now()
	size, err := buildInitramfs(ctx, k, opts, initrd)
	if err != nil {
		return 0, fmt.Errorf("building the initramfs: %w", err)
	}
	logLine(fmt.Sprintf("vmtest: initramfs %.1f MB built in %s; booting %s",
		float64(size)/(1<<20), time.Since(start).Round(time.Millisecond), k.Version))
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	took, err := runQEMU(ctx, qemuArgs(k, opts, initrd, nonce, 1), nonce, logLine)
	for boot := 2; boot <= maxBoots && errors.Is(err, ErrWedged); boot++ {
		// The emulator's hazard, not the tests': the same image, booted again in the time that is left.
		logLine(fmt.Sprintf("vmtest: %v", err))
		logLine(fmt.Sprintf("vmtest: booting again (%s of the %s left)", time.Until(deadlineOf(ctx)).Round(time.Second), opts.Timeout))
		nonce = newNonce()
		var again time.Duration
		again, err = runQEMU(ctx, qemuArgs(k, opts, initrd, nonce, boot), nonce, logLine)
		took += again
	}
	return took, err
}

// maxBoots bounds the boots of a run whose guests wedge; the run's Timeout bounds them all.
const maxBoots = 3

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

func withDefaults(opts Options) Options {
	if opts.Memory == "" {
		opts.Memory = "1024"
	}
	if opts.CPUs <= 0 {
		opts.CPUs = 1
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Minute
	}
	if !hasFlag(opts.Args, "test.timeout") && opts.Timeout >= time.Minute {
		opts.Args = append([]string{"-test.timeout=" + (opts.Timeout * 9 / 10).String()}, opts.Args...)
	}
	return opts
}

// hasFlag reports whether args set the Go flag name, in any of the flag package's spellings.
func hasFlag(args []string, name string) bool {
	for _, a := range args {
		a = strings.TrimLeft(a, "-")
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

// newNonce marks this boot's result line, so that nothing else on the console (a test printing a marker, a
// stale line) can pass for it.
func newNonce() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// buildInitramfs writes the guest's root filesystem to path and returns the archive's size. It is left
// uncompressed: gzip would halve a 50 MB test binary but take 2.5 s to compress on the host (writing the
// archive takes 0.1 s), and the emulated guest would then inflate it, where copying 57 MB takes 0.6 s.
func buildInitramfs(ctx context.Context, k *Kernel, opts Options, path string) (int64, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	ix, err := loadModuleIndex(k.ModulesDir)
	if err != nil {
		return 0, err
	}
	mods, err := ix.closure(opts.Modules)
	if err != nil {
		return 0, err
	}
	img := newImage()
	for _, b := range opts.Binaries {
		if err := img.binary(ctx, b); err != nil {
			return 0, fmt.Errorf("binary %s: %w", b, err)
		}
	}
	if len(opts.Binaries) > 0 {
		// What libc reads to resolve "tcp" or a service name, as iptables and ipvsadm do.
		for _, f := range []string{"/etc/protocols", "/etc/services"} {
			if _, err := os.Stat(f); err == nil {
				img.mirror(f)
			}
		}
	}
	for _, rel := range mods {
		if err := img.hostFile(filepath.Join("/lib/modules", k.Version, rel), filepath.Join(k.ModulesDir, rel)); err != nil {
			return 0, err
		}
	}
	// A test binary built with cgo is dynamically linked: it needs its libraries and loader like any program.
	if err := img.hostFile("/init", exe); err != nil {
		return 0, err
	}
	if err := img.libsOf(ctx, exe); err != nil {
		return 0, fmt.Errorf("the test binary: %w", err)
	}
	cfg, _ := json.Marshal(guestConfig{Kernel: k.Version, Modules: mods, Args: opts.Args, InitExits: opts.initExits})
	img.bytes(configPath, cfg, 0o644)
	return writeImage(img, path)
}

func writeImage(img *image, path string) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	// Buffered for the many small headers; file contents still go through copy_file_range (bufio's ReadFrom).
	w := bufio.NewWriterSize(f, 1<<20)
	if err := img.write(w); err != nil {
		return 0, err
	}
	if err := w.Flush(); err != nil {
		return 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), f.Close()
}
