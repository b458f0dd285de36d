package vmtest

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	if InGuest() {
		GuestMain(m)
	}
	os.Exit(m.Run())
}

// Flags the host passes to the guest to make one of its tests misbehave on purpose.
var (
	guestFail  = flag.Bool("vmtest.fail", false, "in the VM: TestGuestFails fails")
	guestWedge = flag.Bool("vmtest.wedge", false, "in the VM: TestGuestWedgesOnce hangs on the first boot")
	guestPanic = flag.Bool("vmtest.panic", false, "in the VM: TestGuestPanics panics in a goroutine")
)

func skipUnlessGuest(t *testing.T) {
	if !InGuest() {
		t.Skip("runs inside the test VM (the TestBoot* tests boot it)")
	}
}

// --- Boots: each TestBoot* boots the VM on the host, and its TestGuest* twin runs inside ---

func TestBootsAndLoadsIPVS(t *testing.T) {
	took := Boot(t, Options{
		Modules: []string{"ip_vs", "ip_vs_rr"},
		Args:    []string{"-test.run=^TestGuestIPVS$", "-test.v"},
	})
	t.Logf("VM wall time (qemu start to power-off) %s", took.Round(time.Millisecond))
}

func TestGuestIPVS(t *testing.T) {
	skipUnlessGuest(t)
	if fi, err := os.Stat("/proc/sys/net/ipv4/vs"); err != nil || !fi.IsDir() {
		t.Fatalf("/proc/sys/net/ipv4/vs: %v", err)
	}
	table, err := os.ReadFile("/proc/net/ip_vs")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("/proc/net/ip_vs:\n%s", table)
	mods, err := os.ReadFile("/proc/modules")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"ip_vs ", "ip_vs_rr ", "nf_conntrack "} {
		if !bytes.Contains(mods, []byte("\n"+m)) && !bytes.HasPrefix(mods, []byte(m)) {
			t.Errorf("module %sis not loaded; /proc/modules:\n%s", m, mods)
		}
	}
}

// The point of the harness: it cannot pass a guest whose tests fail, whatever way they fail.
func TestBootFailsWhenTheGuestFails(t *testing.T) {
	k := needVM(t)
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"failing test", Options{Args: []string{"-test.run=^TestGuestFails$", "-vmtest.fail"}},
			"the guest's tests failed (exit 1)"},
		{"panic in a test goroutine", Options{Args: []string{"-test.run=^TestGuestPanics$", "-vmtest.panic"}},
			"the guest's tests failed (exit 2)"},
		{"no test matches", Options{Args: []string{"-test.run=^TestNoSuchGuestTest$"}},
			"the guest ran no tests"},
		{"module that does not exist", Options{Modules: []string{"no_such_module"}},
			`module "no_such_module" is neither in modules.dep nor built in`},
		{"init dies", Options{initExits: true}, "the guest died without a result"},
		{"timeout", Options{Timeout: time.Second, Args: []string{"-test.run=^TestGuestIPVS$"}},
			"the VM did not finish in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			took, err := boot(t.Context(), k, tc.opts, func(line string) { t.Log(line) })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("boot: got error %v, want one containing %q", err, tc.want)
			}
			t.Logf("failed as it should after %s: %.200s", took.Round(time.Millisecond), err)
		})
	}
}

func TestGuestFails(t *testing.T) {
	skipUnlessGuest(t)
	if !*guestFail {
		t.Skip("only with -vmtest.fail")
	}
	t.Fatal("failing on purpose (-vmtest.fail)")
}

// A guest wedged on its first boot is stopped and booted again, and the run passes on the second boot.
func TestBootAgainWhenWedged(t *testing.T) {
	k := needVM(t)
	var lines []string
	took, err := boot(t.Context(), k, Options{Args: []string{"-test.run=^TestGuestWedgesOnce$", "-vmtest.wedge", "-test.v"}},
		func(line string) { lines = append(lines, line); t.Log(line) })
	if err != nil {
		t.Fatalf("boot: %v", err)
	}
	if log := strings.Join(lines, "\n"); strings.Count(log, "vmtest: booting again") != 1 || !strings.Contains(log, "--- PASS: TestGuestWedgesOnce") {
		t.Errorf("the run was not booted again once and passed")
	}
	t.Logf("wedged, stopped and passed on the second boot in %s", took.Round(time.Millisecond))
}

// TestGuestWedgesOnce prints what the kernel's lockup watchdog says of a CPU stuck for a minute and hangs, on
// the first boot; it passes on the next.
func TestGuestWedgesOnce(t *testing.T) {
	skipUnlessGuest(t)
	if !*guestWedge {
		t.Skip("only with -vmtest.wedge")
	}
	if os.Getenv(bootEnv) == "1" {
		fmt.Printf("[   99.000000] watchdog: BUG: soft lockup - CPU#0 stuck for %ds! [vmtest:1]\n", wedgedAfter+1)
		time.Sleep(time.Hour)
	}
}

func TestGuestPanics(t *testing.T) {
	skipUnlessGuest(t)
	if !*guestPanic {
		t.Skip("only with -vmtest.panic")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		panic("panicking on purpose (-vmtest.panic)")
	}()
	<-done
}

// Host programs with their libraries and, for iptables, its dlopened extensions work in the guest.
func TestBootWithBinaries(t *testing.T) {
	bins := []string{"ip", "iptables-restore", "iptables-save"}
	for _, b := range bins {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("%s not installed: %v", b, err)
		}
	}
	took := Boot(t, Options{
		Modules:  []string{"nf_tables", "nft_compat", "nft_chain_nat", "xt_MASQUERADE", "xt_comment", "xt_tcpudp", "dummy"},
		Binaries: bins,
		Args:     []string{"-test.run=^TestGuestBinaries$", "-test.v"},
	})
	t.Logf("VM wall time %s", took.Round(time.Millisecond))
}

func TestGuestBinaries(t *testing.T) {
	skipUnlessGuest(t)
	run := func(stdin string, name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// Not dummy0: loading the dummy module makes that one.
	run("", "ip", "link", "add", "vmtest0", "type", "dummy")
	if out := run("", "ip", "-br", "link"); !strings.Contains(out, "lo ") || !strings.Contains(out, "vmtest0") {
		t.Errorf("ip -br link:\n%s", out)
	}
	// -p tcp --dport and -m comment come from the extensions iptables dlopens.
	run("*nat\n-A POSTROUTING -p tcp --dport 80 -m comment --comment vmtest -j MASQUERADE\nCOMMIT\n", "iptables-restore")
	if out := run("", "iptables-save", "-t", "nat"); !strings.Contains(out, `--comment vmtest -j MASQUERADE`) {
		t.Errorf("iptables-save -t nat:\n%s", out)
	}
}

// The CPU report (k8sguide_vm_cpu=1 on the kernel line) names where the guest's time went: here the test
// process, which spins for a second and a half of CPU time.
func TestBootReportsCPUUse(t *testing.T) {
	k := needVM(t)
	t.Setenv(KernelArgsEnv, cpuUseEnv+"=1")
	var lines []string
	took, err := boot(t.Context(), k, Options{Args: []string{"-test.run=^TestGuestSpins$", "-test.v"}}, func(line string) {
		t.Log(line)
		lines = append(lines, line)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("VM wall time %s", took.Round(time.Millisecond))
	var total, spun float64
	for _, l := range lines {
		fmt.Sscanf(l, "vmtest: the guest's CPU time, %f s in all", &total)
		if f := strings.Fields(l); len(f) == 4 && f[0] == "vmtest:" && f[2] == "s" && f[3] == "init" {
			fmt.Sscan(f[1], &spun)
		}
	}
	// Not spun <= total: a process's own time and /proc/stat's are accounted apart, and differ by a tick or so.
	if total < 1.5 || spun < 1.4 {
		t.Errorf("the report says %.1f s in all, %.1f s by init (the test process): want at least 1.5 and 1.4", total, spun)
	}
}

func TestGuestSpins(t *testing.T) {
	skipUnlessGuest(t)
	var r unix.Rusage
	for {
		if err := unix.Getrusage(unix.RUSAGE_SELF, &r); err != nil {
			t.Fatal(err)
		}
		if time.Duration(r.Utime.Nano()+r.Stime.Nano()) >= 1500*time.Millisecond {
			return
		}
	}
}

// --- On the host ---

func TestCpioRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := newCpioWriter(&buf)
	for _, err := range []error{
		w.Dir("/usr", 0o755),
		w.Dir("tmp", fs.ModeSticky|0o777),
		w.File("/usr/hello", 0o644, 5, strings.NewReader("hello")),
		w.File("/empty", 0o600, 0, strings.NewReader("")),
		w.Symlink("/lib", "usr/lib"),
		w.CharDev("/dev/console", 0o600, 5, 1),
		w.Close(),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	got, err := readCpio(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	want := []cpioEntry{
		{"usr", 0o040755, "", 0, 0},
		{"tmp", 0o041777, "", 0, 0},
		{"usr/hello", 0o100644, "hello", 0, 0},
		{"empty", 0o100600, "", 0, 0},
		{"lib", 0o120777, "usr/lib", 0, 0},
		{"dev/console", 0o020600, "", 5, 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("read back\n%+v\nwant\n%+v", got, want)
	}
	if err := w.File("/short", 0o644, 10, strings.NewReader("abc")); err == nil {
		t.Error("a reader shorter than the size it was given is not an error")
	}
	// Where the system has a cpio tool (GNU's or busybox's), it must agree.
	list := []string{"cpio", "-t"}
	if _, err := exec.LookPath("cpio"); err != nil {
		list = append([]string{"busybox"}, list...)
	}
	if _, err := exec.LookPath(list[0]); err == nil {
		cmd := exec.Command(list[0], list[1:]...)
		cmd.Stdin = bytes.NewReader(buf.Bytes())
		out, err := cmd.Output()
		if err != nil || strings.Fields(string(out))[2] != "usr/hello" {
			t.Errorf("cpio -t: %v\n%s", err, out)
		}
	}
}

type cpioEntry struct {
	Name         string
	Mode         uint32
	Data         string
	Rmajor, Rmin uint32
}

// readCpio is a strict newc reader: magic, hex fields, 4-byte alignment and the trailer.
func readCpio(b []byte) ([]cpioEntry, error) {
	var entries []cpioEntry
	off := 0
	for {
		if off%4 != 0 || off+110 > len(b) {
			return nil, fmt.Errorf("bad header offset %d of %d", off, len(b))
		}
		h := string(b[off : off+110])
		if h[:6] != "070701" {
			return nil, fmt.Errorf("bad magic %q at %d", h[:6], off)
		}
		field := func(i int) uint32 {
			v, _ := strconv.ParseUint(h[6+8*i:14+8*i], 16, 32)
			return uint32(v)
		}
		mode, size, rmaj, rmin, namesize := field(1), int(field(6)), field(9), field(10), int(field(11))
		name := string(b[off+110 : off+110+namesize-1])
		if b[off+110+namesize-1] != 0 {
			return nil, fmt.Errorf("%s: name not NUL-terminated", name)
		}
		off += 110 + namesize
		off += pad4(off)
		if name == "TRAILER!!!" {
			if off != len(b) {
				return nil, fmt.Errorf("%d bytes after the trailer", len(b)-off)
			}
			return entries, nil
		}
		entries = append(entries, cpioEntry{name, mode, string(b[off : off+size]), rmaj, rmin})
		off += size
		off += pad4(off)
	}
}

func TestImageResolvesThroughItsSymlinks(t *testing.T) {
	img := newImage()
	img.bytes("/lib/modules/6.1/x.ko", []byte("ko"), 0o644)
	img.bytes("/lib64/ld.so", []byte("ld"), 0o755)
	img.symlink("/usr/sbin/tool", "/etc/alternatives/tool")
	img.bytes("/usr/sbin/tool", []byte("not this: the symlink was first"), 0o755)
	for p, want := range map[string]string{
		"/usr/lib/modules/6.1/x.ko": "ko",
		"/usr/lib64/ld.so":          "ld",
	} {
		if e := img.byPath[p]; e == nil || string(e.data) != want {
			t.Errorf("%s: %+v, want data %q", p, e, want)
		}
	}
	if e := img.byPath["/usr/sbin/tool"]; e == nil || e.target != "/etc/alternatives/tool" {
		t.Errorf("/usr/sbin/tool: %+v", e)
	}
	if img.byPath["/lib/modules"] != nil {
		t.Error("/lib/modules was made although /lib is a symlink")
	}
	// Every entry's parent comes before it, as the kernel's unpacker needs.
	seen := map[string]bool{"/": true}
	for _, e := range img.entries {
		if !seen[filepath.Dir(e.path)] {
			t.Errorf("%s comes before its directory", e.path)
		}
		seen[e.path] = true
	}
}

// mirror keeps a host symlink chain as it is, so that multi-call programs see the name they were called by.
func TestImageMirrorsSymlinkChains(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "sbin", "multi")
	os.MkdirAll(filepath.Dir(real), 0o755)
	os.MkdirAll(filepath.Join(dir, "alternatives"), 0o755)
	os.WriteFile(real, []byte("#!/bin/sh\n"), 0o755)
	os.Symlink("multi", filepath.Join(dir, "sbin", "tool-variant"))
	os.Symlink(filepath.Join(dir, "sbin", "tool-variant"), filepath.Join(dir, "alternatives", "tool"))
	os.Symlink(filepath.Join(dir, "alternatives", "tool"), filepath.Join(dir, "sbin", "tool"))
	img := newImage()
	if err := img.mirror(filepath.Join(dir, "sbin", "tool")); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{
		"sbin/tool":         filepath.Join(dir, "alternatives", "tool"),
		"alternatives/tool": filepath.Join(dir, "sbin", "tool-variant"),
		"sbin/tool-variant": "multi",
	} {
		if e := img.byPath[filepath.Join(dir, name)]; e == nil || e.target != target {
			t.Errorf("%s: %+v, want a symlink to %s", name, e, target)
		}
	}
	if e := img.byPath[real]; e == nil || e.src != real || e.mode != 0o755 {
		t.Errorf("%s: %+v", real, e)
	}
}

// A program built for a test sits in a temporary directory, which the guest mounts a tmpfs over: the image keeps
// it elsewhere, and the name on PATH leads there.
func TestImageRelocatesProgramsUnderGuestMounts(t *testing.T) {
	prog := filepath.Join(os.TempDir(), fmt.Sprintf("vmtest-reloc-%d", os.Getpid()), "tool")
	os.MkdirAll(filepath.Dir(prog), 0o755)
	defer os.RemoveAll(filepath.Dir(prog))
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, ok := mountedOver(prog); !ok {
		t.Skipf("%s is not under a directory the guest mounts over", prog)
	}
	img := newImage()
	if err := img.binary(t.Context(), prog); err != nil {
		t.Fatal(err)
	}
	guest := path.Join(relocated, prog)
	if e := img.byPath[guest]; e == nil || e.src != prog {
		t.Errorf("%s: %+v, want the program", guest, e)
	}
	if e := img.byPath[prog]; e != nil {
		t.Errorf("%s is in the image, where the guest's tmpfs hides it: %+v", prog, e)
	}
	if e := img.byPath["/usr/sbin/tool"]; e == nil || e.target != guest {
		t.Errorf("/usr/sbin/tool: %+v, want a symlink to %s", e, guest)
	}
}

// The initramfs pieces for real Debian programs: the iptables alternatives chain, libraries, loader and
// extensions. No VM needed.
func TestImageForDebianBinaries(t *testing.T) {
	for _, b := range []string{"ip", "iptables-restore"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("%s not installed: %v", b, err)
		}
	}
	img := newImage()
	for _, b := range []string{"ip", "iptables-restore"} {
		if err := img.binary(t.Context(), b); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"/usr/sbin/iptables-restore", "/sbin/ip", "/lib64/ld-linux-x86-64.so.2",
		"/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libxtables.so.12",
		"/usr/lib/x86_64-linux-gnu/xtables/libxt_comment.so"} {
		if e := img.lookup(p); e == nil || e.src == "" {
			t.Errorf("%s: not a file in the image (%+v)", p, e)
		}
	}
	if e := img.byPath["/usr/sbin/iptables-restore"]; e == nil || e.mode&fs.ModeSymlink == 0 {
		t.Errorf("/usr/sbin/iptables-restore is not the symlink it is on the host: %+v", e)
	}
	var out bytes.Buffer
	start := time.Now()
	if err := img.write(&out); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d entries, %.1f MB of files, archive %.1f MB written in %s", len(img.entries),
		float64(img.size())/(1<<20), float64(out.Len())/(1<<20), time.Since(start).Round(time.Millisecond))
}

// Captured on Debian bookworm (this repository's development machine) with `ldd /usr/sbin/xtables-nft-multi`
// (iptables 1.8.9).
const lddXtablesNftMulti = `	linux-vdso.so.1 (0x00007f8fcce15000)
	libxtables.so.12 => /lib/x86_64-linux-gnu/libxtables.so.12 (0x00007f8fccd4e000)
	libmnl.so.0 => /lib/x86_64-linux-gnu/libmnl.so.0 (0x00007f8fccd46000)
	libnftnl.so.11 => /lib/x86_64-linux-gnu/libnftnl.so.11 (0x00007f8fccd13000)
	libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f8fccb31000)
	/lib64/ld-linux-x86-64.so.2 (0x00007f8fcce17000)
`

func TestParseLdd(t *testing.T) {
	got, err := parseLdd(lddXtablesNftMulti)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"/lib/x86_64-linux-gnu/libxtables.so.12",
		"/lib/x86_64-linux-gnu/libmnl.so.0",
		"/lib/x86_64-linux-gnu/libnftnl.so.11",
		"/lib/x86_64-linux-gnu/libc.so.6",
		"/lib64/ld-linux-x86-64.so.2",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if libs, err := parseLdd("\tstatically linked\n"); err != nil || len(libs) != 0 {
		t.Errorf("static: %q, %v", libs, err)
	}
	if _, err := parseLdd("\tlibgone.so.1 => not found\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x1)\n"); err == nil ||
		!strings.Contains(err.Error(), "libgone.so.1 not found") {
		t.Errorf("missing library: %v", err)
	}
}

// Lines of the modules.dep the harness wrote for linux-image-6.1.0-56-cloud-amd64, plus a cycle.
const modulesDepFixture = `kernel/lib/libcrc32c.ko:
kernel/net/ipv4/netfilter/nf_defrag_ipv4.ko:
kernel/net/ipv6/netfilter/nf_defrag_ipv6.ko:
kernel/net/netfilter/nf_conntrack.ko: kernel/net/ipv4/netfilter/nf_defrag_ipv4.ko kernel/net/ipv6/netfilter/nf_defrag_ipv6.ko kernel/lib/libcrc32c.ko
kernel/net/netfilter/nf_nat.ko: kernel/net/netfilter/nf_conntrack.ko kernel/lib/libcrc32c.ko
kernel/net/netfilter/ipvs/ip_vs.ko: kernel/net/netfilter/nf_conntrack.ko kernel/lib/libcrc32c.ko kernel/net/ipv6/netfilter/nf_defrag_ipv6.ko
kernel/net/netfilter/ipvs/ip_vs_rr.ko: kernel/net/netfilter/ipvs/ip_vs.ko
kernel/net/netfilter/nf_tables.ko: kernel/net/netfilter/nfnetlink.ko kernel/lib/libcrc32c.ko
kernel/net/netfilter/nfnetlink.ko:
kernel/net/netfilter/nft_chain_nat.ko: kernel/net/netfilter/nf_tables.ko kernel/net/netfilter/nf_nat.ko
kernel/drivers/net/veth.ko:
kernel/test/cycle_a.ko: kernel/test/cycle-b.ko
kernel/test/cycle_b.ko: kernel/test/cycle_a.ko
`

func TestModuleClosure(t *testing.T) {
	ix, err := parseModulesDep(strings.NewReader(modulesDepFixture))
	if err != nil {
		t.Fatal(err)
	}
	ix.builtin["bridge"] = true
	got, err := ix.closure([]string{"ip_vs_rr", "bridge", "nft-chain-nat", "ip_vs", "veth"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"kernel/net/ipv4/netfilter/nf_defrag_ipv4.ko",
		"kernel/net/ipv6/netfilter/nf_defrag_ipv6.ko",
		"kernel/lib/libcrc32c.ko",
		"kernel/net/netfilter/nf_conntrack.ko",
		"kernel/net/netfilter/ipvs/ip_vs.ko",
		"kernel/net/netfilter/ipvs/ip_vs_rr.ko",
		"kernel/net/netfilter/nfnetlink.ko",
		"kernel/net/netfilter/nf_tables.ko",
		"kernel/net/netfilter/nf_nat.ko",
		"kernel/net/netfilter/nft_chain_nat.ko",
		"kernel/drivers/net/veth.ko",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("closure\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := ix.closure([]string{"ip_vs_nope"}); err == nil {
		t.Error("an unknown module is not an error")
	}
	if _, err := ix.closure([]string{"cycle_a"}); err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Errorf("cycle: %v", err)
	}
}

// cachedKernelOrSkip is a kernel already in the cache; tests that only read one skip before it is fetched.
func cachedKernelOrSkip(t *testing.T) *Kernel {
	t.Helper()
	dir, err := DefaultCacheDir()
	if err != nil {
		t.Skip(err)
	}
	k := anyCachedKernel(dir)
	if k == nil {
		t.Skipf("no kernel cached in %s yet (go run ./internal/vmtest/cmd/vmkernel)", dir)
	}
	return k
}

// The modules.dep the harness writes from .modinfo, checked on the cached kernel (skipped before one is cached:
// this test does not download).
func TestWrittenModulesDep(t *testing.T) {
	k := cachedKernelOrSkip(t)
	deps, err := modinfoDepends(filepath.Join(k.ModulesDir, "kernel/net/netfilter/ipvs/ip_vs.ko"))
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("%s has no ip_vs.ko where 6.1 has it: %v", k.Version, err)
	}
	if err != nil || !contains(deps, "nf_conntrack") {
		t.Errorf("ip_vs depends on %q (%v), want nf_conntrack among them", deps, err)
	}
	ix, err := loadModuleIndex(k.ModulesDir)
	if err != nil {
		t.Fatal(err)
	}
	mods, err := ix.closure([]string{"ip_vs_sh", "ip_vs_wrr", "xt_set", "ip_set_hash_ipport", "ip_set_bitmap_port",
		"nft_chain_nat", "veth", "dummy", "br_netfilter"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d modules to load: %s", k.Version, len(mods), strings.Join(mods, " "))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestConsoleVerdict(t *testing.T) {
	const nonce = "0123abcd"
	judge := func(waitErr error, lines ...string) error {
		c := &console{nonce: nonce}
		c.read(strings.NewReader(strings.Join(lines, "\r\n")), func(string) {})
		return c.verdict(context.Background(), waitErr, time.Second)
	}
	pass := resultPrefix + " " + nonce + " exit=0"
	for _, tc := range []struct {
		name    string
		waitErr error
		lines   []string
		want    string // "" for a pass
	}{
		{"pass", nil, []string{"=== RUN TestGuestX", "--- PASS", pass, "[  3.1] reboot: Power down"}, ""},
		{"marker after a kernel message on the same line", nil, []string{"[ 1.0] random: crng init done" + pass}, ""},
		{"escape sequences", nil, []string{"\x1bc\x1b[?7l\x1b[2J" + pass + "\r"}, ""},
		{"fail", nil, []string{"--- FAIL", resultPrefix + " " + nonce + " exit=1"}, "tests failed (exit 1)"},
		{"another boot's marker", nil, []string{resultPrefix + " ffff exit=0"}, "died without a result"},
		{"no marker", errors.New("exit status 1"), []string{"Kernel panic - not syncing: Attempted to kill init!"},
			"died without a result"},
		{"setup", nil, []string{"vmtest: guest setup: finit_module", resultPrefix + " " + nonce + " exit=125"},
			"could not set up"},
		{"no tests", nil, []string{"testing: warning: no tests to run", pass}, "ran no tests"},
		// The lines a wedged guest printed here (run stopped by the host), and a short lockup it got over.
		{"wedged", errors.New("signal: killed"), []string{
			"[  364.621289] watchdog: BUG: soft lockup - CPU#0 stuck for 45s! [k8sguide-lab:177]",
			"[  364.749296] watchdog: BUG: soft lockup - CPU#1 stuck for 45s! [k8sguide-lab:160]",
			"[  392.621193] watchdog: BUG: soft lockup - CPU#0 stuck for 71s! [k8sguide-lab:177]"},
			"emulated CPUs wedged: the kernel reported a CPU stuck for 71 s"},
		{"a short lockup", nil, []string{"[  9.1] watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [x:1]", pass}, ""},
	} {
		err := judge(tc.waitErr, tc.lines...)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
	// The host stops qemu once, at the first report past wedgedAfter.
	stops := 0
	c := &console{nonce: nonce, wedged: func() { stops++ }}
	for _, secs := range []int{22, 50, 78, 106} {
		c.line(fmt.Sprintf("[ 1.0] watchdog: BUG: soft lockup - CPU#0 stuck for %ds! [k8sguide-lab:177]", secs))
	}
	if err := c.verdict(context.Background(), nil, time.Second); stops != 1 || !errors.Is(err, ErrWedged) {
		t.Errorf("wedged guest: stopped %d times, verdict %v", stops, err)
	}
}

func TestWithDefaults(t *testing.T) {
	o := withDefaults(Options{Args: []string{"-test.v"}})
	if o.Memory != "1024" || o.CPUs != 1 || o.Timeout != 5*time.Minute || o.Args[0] != "-test.timeout=4m30s" {
		t.Errorf("defaults: %+v", o)
	}
	o = withDefaults(Options{Timeout: 2 * time.Minute, Args: []string{"--test.timeout", "10s"}})
	if len(o.Args) != 2 {
		t.Errorf("a -test.timeout of the caller's was overridden: %q", o.Args)
	}
}

func TestAptField(t *testing.T) {
	// `apt-cache depends linux-image-cloud-amd64` and the head of `apt-cache show --no-all-versions` on bookworm.
	const depends = "linux-image-cloud-amd64\n  Depends: linux-image-6.1.0-56-cloud-amd64\n"
	const show = "Package: linux-image-6.1.0-56-cloud-amd64\nSource: linux-signed-amd64 (6.1.192+2)\nVersion: 6.1.192-2\n"
	if got := aptField(depends, "Depends", "linux-image-"); got != "linux-image-6.1.0-56-cloud-amd64" {
		t.Errorf("Depends: %q", got)
	}
	if got := aptField(show, "Version", ""); got != "6.1.192-2" {
		t.Errorf("Version: %q", got)
	}
}

// A kernel standing in for a retired pin is found again without apt, and only for that pin.
func TestFallbackKernel(t *testing.T) {
	dir := t.TempDir()
	current := debPackage{"linux-image-6.1.0-99-cloud-amd64", "6.1.300-1"}
	entry := filepath.Join(dir, current.dirName())
	os.MkdirAll(entry, 0o755)
	os.WriteFile(filepath.Join(entry, "kernel.json"), []byte(`{"package":"linux-image-6.1.0-99-cloud-amd64",
		"packageVersion":"6.1.300-1","version":"6.1.0-99-cloud-amd64"}`), 0o644)
	old := debPackage{"linux-image-6.1.0-1-cloud-amd64", "6.1.4-1"}
	if fallbackKernel(dir, old) != nil {
		t.Fatal("a fallback before any was recorded")
	}
	recordFallback(dir, old, current)
	k := fallbackKernel(dir, old)
	if k == nil || k.Version != "6.1.0-99-cloud-amd64" || k.ModulesDir != filepath.Join(entry, "lib/modules/6.1.0-99-cloud-amd64") {
		t.Fatalf("fallback: %+v", k)
	}
	if fallbackKernel(dir, debPackage{"linux-image-6.1.0-100-cloud-amd64", "6.1.301-1"}) != nil {
		t.Error("the fallback recorded for one pin is used for another")
	}
}

// The initramfs for a boot, without booting it: this test binary as /init, the modules' closure, the config.
func TestBuildInitramfs(t *testing.T) {
	k := cachedKernelOrSkip(t)
	out := filepath.Join(t.TempDir(), "initramfs.cpio")
	start := time.Now()
	size, err := buildInitramfs(t.Context(), k, withDefaults(Options{Modules: []string{"ip_vs_rr"}, Args: []string{"-test.v"}}), out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%.1f MB in %s", float64(size)/(1<<20), time.Since(start).Round(time.Millisecond))
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := readCpio(data)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]cpioEntry{}
	for _, e := range entries {
		files[e.Name] = e
	}
	exe, _ := os.Executable()
	fi, _ := os.Stat(exe)
	if e := files["init"]; len(e.Data) != int(fi.Size()) || e.Mode&0o111 == 0 {
		t.Errorf("init: %d bytes mode %o, want the %d-byte test binary, executable", len(e.Data), e.Mode, fi.Size())
	}
	want := `{"kernel":"` + k.Version + `","modules":[`
	if cfg := files["vmtest.json"].Data; !strings.HasPrefix(cfg, want) || !strings.Contains(cfg, `"-test.timeout=4m30s","-test.v"`) {
		t.Errorf("vmtest.json: %s", cfg)
	}
	for _, m := range []string{"ip_vs.ko", "ip_vs_rr.ko", "nf_conntrack.ko", "libcrc32c.ko"} {
		found := false
		for name := range files {
			found = found || strings.HasPrefix(name, "usr/lib/modules/"+k.Version+"/") && strings.HasSuffix(name, "/"+m)
		}
		if !found {
			t.Errorf("no %s under usr/lib/modules/%s (lib is a symlink to usr/lib)", m, k.Version)
		}
	}
	if files["dev/console"].Rmajor != 5 || files["lib"].Data != "usr/lib" {
		t.Errorf("dev/console %+v, lib %+v", files["dev/console"], files["lib"])
	}
}
