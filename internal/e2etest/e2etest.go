//go:build linux

// Package e2etest runs the real k8sguide binary against real namespaces for the end-to-end tests of several
// packages: it builds the binary once per test binary, gives each run a private state directory, and checks
// that a lab leaves nothing behind.
package e2etest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mattn/go-runewidth"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/ebpf/datapath"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/render"
	"github.com/k8sguide/k8sguide/internal/netnstest"
	"github.com/k8sguide/k8sguide/internal/stopclean"
	"github.com/k8sguide/k8sguide/internal/vmtest"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/netns"
	"github.com/k8sguide/k8sguide/lab/providers"
	"github.com/k8sguide/k8sguide/lab/state"
	"github.com/k8sguide/k8sguide/lab/workload"
)

var (
	// Binary is the k8sguide Binary under test ($K8SGUIDE_BIN, or built by Main).
	Binary string
	// StateDir is a state root private to this test run.
	StateDir string
)

// Main is TestMain's body: as root it builds the Binary and sets up a private state directory, then runs the
// tests (which skip themselves when not root). In the IPVS test VM (internal/vmtest) it is init's job first,
// and the Binary is the one the host put on the guest's PATH (InVM).
func Main(m *testing.M) int {
	if vmtest.InGuest() && os.Getpid() == 1 {
		vmtest.GuestMain(m) // runs the tests in a child, which comes back here, and never returns
	}
	if argv := os.Getenv(measureEnv); argv != "" {
		return measured(argv)
	}
	// These are netns labs, even on a host whose Docker engine would make `auto` pick kind.
	os.Setenv(providers.Env, "netns")
	if os.Geteuid() != 0 {
		return m.Run() // the tests skip themselves
	}
	dir, err := os.MkdirTemp("", "k8sguide-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	// Stopped by a signal, the run takes down the labs in its state directory and removes the directory: no
	// test's cleanup runs then.
	stopclean.First(func() {
		names, _ := Provider().Store.List()
		for _, name := range names {
			exec.Command(Binary, "down", "--name", name).Run()
		}
	})
	stopclean.Remove(dir)
	// The not-root test runs the Binary as nobody, who must be able to reach it.
	os.Chmod(dir, 0o755)
	Binary = os.Getenv("K8SGUIDE_BIN")
	if vmtest.InGuest() {
		// Emulated CPUs: node proxies resyncing every 30 s would keep them busy (see netns.SyncPeriodEnv).
		os.Setenv(netns.SyncPeriodEnv, "10m")
		if Binary == "" {
			// Resolved: the lab's processes run it by its real path, which AssertNothingLeft looks for.
			if Binary, err = exec.LookPath("k8sguide"); err == nil {
				Binary, err = filepath.EvalSymlinks(Binary)
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "the VM holds no k8sguide binary (boot it with InVM):", err)
				return 1
			}
		}
	}
	if Binary == "" {
		Binary = filepath.Join(dir, "k8sguide")
		// And beside it, as make build puts them, k8sguide-lab (what the lab's namespaces run, and kubectl) and
		// k8sguide-graphviz, which trace -o svg|html runs.
		for _, pkg := range []string{"k8sguide", "k8sguide-lab", "k8sguide-graphviz"} {
			build := exec.Command("go", "build", "-o", filepath.Join(dir, pkg), "github.com/k8sguide/k8sguide/cmd/"+pkg)
			build.Stdout, build.Stderr = os.Stderr, os.Stderr
			if err := build.Run(); err != nil {
				fmt.Fprintf(os.Stderr, "building %s: %v\n", pkg, err)
				return 1
			}
		}
	}
	StateDir = filepath.Join(dir, "state")
	os.Setenv("K8SGUIDE_STATE_DIR", StateDir)
	// Labs write their kubeconfig context as kind does: into the run's directory, not root's ~/.kube.
	os.Setenv("KUBECONFIG", filepath.Join(dir, "kubeconfig"))
	// Compiled datapath objects, and Graphviz's compiled WebAssembly (trace -o html), stay in the run's
	// directory too: the tests leave nothing in ~/.cache.
	os.Setenv(datapath.CacheEnv, filepath.Join(dir, "cilium-objects"))
	os.Setenv(render.GraphvizCacheEnv, filepath.Join(dir, "graphviz"))
	// And what the Binary keeps in the temporary directory (a failed up's logs, which the fault tests provoke).
	// Sticky and open to all, as /tmp is: the not-root test runs the Binary as nobody (os.ModeSticky: Go's
	// FileMode does not take the octal 01000).
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o755); err == nil && os.Chmod(tmp, 0o777|os.ModeSticky) == nil {
		os.Setenv("TMPDIR", tmp)
	}
	code := m.Run()
	if err := downShared(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = max(code, 1)
	}
	return code
}

var (
	agentOnce sync.Once
	agentErr  error
)

// NeedAgent builds k8sguide-cilium (the ebpf dataplane's node agent, a nested module) once per test binary,
// beside Binary, and points the provider at it. With Cilium in the build cache this takes seconds; cold, about
// a minute and a half.
func NeedAgent(t testing.TB) {
	t.Helper()
	agentOnce.Do(func() {
		if os.Getenv(netns.AgentEnv) != "" {
			return
		}
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/k8sguide/k8sguide").Output()
		if err != nil {
			agentErr = fmt.Errorf("finding the module root: %w", err)
			return
		}
		agent := filepath.Join(filepath.Dir(Binary), netns.AgentName)
		build := exec.Command("go", "build", "-o", agent, ".")
		build.Dir = filepath.Join(strings.TrimSpace(string(out)), "dataplanes", "ebpf", "cilium")
		if msg, err := build.CombinedOutput(); err != nil {
			agentErr = fmt.Errorf("building %s: %v\n%s", netns.AgentName, err, msg)
			return
		}
		os.Setenv(netns.AgentEnv, agent)
	})
	if agentErr != nil {
		t.Fatal(agentErr)
	}
}

// NeedEBPF skips a test of the ebpf dataplane where Cilium's datapath cannot be built (no clang >= 18.1, no
// Cilium sources), saying why, and builds the node agent.
func NeedEBPF(t testing.TB) {
	t.Helper()
	if _, err := datapath.FindClang(); err != nil {
		t.Skipf("cannot build Cilium's datapath here: %v", err)
	}
	if _, err := datapath.Sources(); err != nil {
		// Building the agent downloads Cilium's module, sources included.
		NeedAgent(t)
		if _, err := datapath.Sources(); err != nil {
			t.Skipf("cannot build Cilium's datapath here: %v", err)
		}
	}
	NeedAgent(t)
}

func NeedRoot(t testing.TB, tools ...string) {
	t.Helper()
	netnstest.NeedRoot(t, tools...)
}

func ToolFor(d dataplanes.Name) string {
	if d == dataplanes.NFTables {
		return "nft"
	}
	return "iptables-restore"
}

// k8sguide runs the Binary and returns stdout; stderr goes to the test log.
func K8sguide(t testing.TB, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(Binary, args...)
	// A classroom projector's width: the views a student reads must fit it (checked below).
	cmd.Env = append(os.Environ(), "COLUMNS="+strconv.Itoa(Columns))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if _, bench := t.(*testing.B); !bench || err != nil {
		t.Logf("$ k8sguide %s\n%s%s", strings.Join(args, " "), out.String(), errb.String())
	}
	if fitted(args) {
		// stdout only: an error is one line, whatever its length, so that it reads as one thing.
		for line := range strings.Lines(out.String()) {
			if w := runewidth.StringWidth(strings.TrimRight(line, "\n")); w > Columns {
				t.Errorf("k8sguide %s: a line of %d columns, with COLUMNS=%d:\n%s", strings.Join(args, " "), w, Columns, line)
			}
		}
	}
	if err != nil {
		return out.String(), fmt.Errorf("%w: %s", err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// Columns is the terminal width every k8sguide run of the tests has.
const Columns = 100

// fitted says whether a command's output must fit Columns: the views a student reads (up, get, nodeport, trace
// with or without --verify, lb list), unless -o asks for wide or data output. exec and kubectl print what
// other tools print.
func fitted(args []string) bool {
	if len(args) == 0 {
		return false
	}
	for i, a := range args {
		if (a == "-o" || a == "--output") && i+1 < len(args) && args[i+1] != "table" {
			return false
		}
		if strings.HasPrefix(a, "-o") && len(a) > 2 && a != "-otable" || strings.HasPrefix(a, "--output=") && a != "--output=table" {
			return false
		}
	}
	switch args[0] {
	case "up", "get", "nodeport", "trace", "compare":
		return true
	case "lb":
		return len(args) > 1 && args[1] == "list"
	}
	return false
}

func MustK8sguide(t testing.TB, args ...string) string {
	t.Helper()
	out, err := K8sguide(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func Provider() *netns.Provider {
	return &netns.Provider{Store: state.Store{Root: StateDir}, Exe: Binary}
}

// UpLab creates a lab and registers its removal, so a failing test leaves nothing behind.
func UpLab(t testing.TB, name string, args ...string) {
	t.Helper()
	DownAtCleanup(t, name)
	MustK8sguide(t, append([]string{"up", "--name", name}, args...)...)
}

// DownAtCleanup registers the removal of lab name, if it still exists when t ends (a benchmark that brings
// labs up and down itself and fails between the two), and checks that nothing of it is left.
func DownAtCleanup(t testing.TB, name string) {
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join(StateDir, name)); err == nil {
			K8sguide(t, "down", "--name", name)
		}
		AssertNothingLeft(t, name)
	})
}

// AssertNothingLeft checks that no namespace, process, veth or state of the lab remains.
func AssertNothingLeft(t testing.TB, name string) {
	t.Helper()
	for _, left := range Leftovers(name) {
		t.Error(left)
	}
}

// Leftovers says what of lab name is still in the kernel, the process table, the state directory or the
// kubeconfig: nothing, once the lab is down.
func Leftovers(name string) []string {
	var left []string
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], name+"-") {
			left = append(left, fmt.Sprintf("namespace %s is left behind", f[0]))
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, _ := os.ReadFile(p)
		isOurs := bytes.Contains(data, []byte("internal\x00")) && bytes.Contains(data, []byte(Binary)) ||
			bytes.Contains(data, []byte(netns.AgentName+"\x00"))
		if isOurs && bytes.Contains(data, []byte(name)) {
			left = append(left, fmt.Sprintf("process %s (%q) is left behind", p, bytes.ReplaceAll(data, []byte{0}, []byte{' '})))
		}
	}
	links, _ := exec.Command("ip", "-o", "link", "show").Output()
	if strings.Contains(string(links), "veth-node") {
		left = append(left, fmt.Sprintf("a lab veth is left in the root namespace:\n%s", links))
	}
	if _, err := os.Stat(filepath.Join(StateDir, name)); err == nil {
		left = append(left, fmt.Sprintf("state of lab %s is left behind", name))
	}
	if data, err := os.ReadFile(os.Getenv("KUBECONFIG")); err == nil && bytes.Contains(data, []byte("name: "+netns.KubeContext(name)+"\n")) {
		left = append(left, fmt.Sprintf("context %s is left in %s", netns.KubeContext(name), os.Getenv("KUBECONFIG")))
	}
	mounts, _ := os.ReadFile("/proc/self/mounts")
	if dir := netns.BPFFSDir(state.Store{Root: StateDir}, name); bytes.Contains(mounts, []byte(" "+dir+" ")) {
		left = append(left, fmt.Sprintf("the lab's bpffs %s is still mounted", dir))
	}
	if dir := netns.CgroupMount(state.Store{Root: StateDir}, name); bytes.Contains(mounts, []byte(" "+dir+" ")) {
		left = append(left, fmt.Sprintf("the lab's cgroup v2 mount %s is still mounted", dir))
	}
	// The lab's cgroups, wherever the host mounts the hierarchy (unified or hybrid).
	for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if _, err := os.Stat(filepath.Join(root, "k8sguide", name)); err == nil {
			left = append(left, fmt.Sprintf("the lab's cgroup %s is left behind", filepath.Join(root, "k8sguide", name)))
		}
	}
	return left
}

// Verify runs `trace --name name --verify -o json args...` and returns the verification, whatever its result.
func Verify(t testing.TB, name string, args ...string) *trace.Verification {
	t.Helper()
	out, err := Quiet(append([]string{"trace", "--name", name, "--verify", "-o", "json"}, args...)...)
	var v trace.Verification
	if jerr := json.Unmarshal([]byte(out), &v); jerr != nil {
		t.Fatalf("trace --verify %v: %v (output %q)", args, err, out)
	}
	return &v
}

func NodePortOf(t testing.TB, name, service string) string {
	t.Helper()
	w, err := Provider().Workloads(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	svcs, err := w.Services(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range svcs {
		if s.Name == service {
			return strconv.Itoa(int(s.Spec.Ports[0].NodePort))
		}
	}
	t.Fatalf("service %s not found", service)
	return ""
}

// BridgeIP is the address of a node's pod bridge (cni0): the gateway of the pod CIDR the controller-manager gave
// the node, which is not always the next in the nodes' order.
func BridgeIP(t testing.TB, name, node string) string {
	t.Helper()
	st, err := Provider().Status(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range st.Nodes {
		if n.Name == node {
			gw, err := workload.Gateway(n.PodCIDR)
			if err != nil {
				t.Fatal(err)
			}
			return gw.Addr().String()
		}
	}
	t.Fatalf("no node %s in lab %s", node, name)
	return ""
}

// Quiet runs the binary like K8sguide but logs nothing; the error carries stderr.
func Quiet(args ...string) (string, error) {
	cmd := exec.Command(Binary, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("k8sguide %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// ServicesManifest is the web Deployment (3 replicas) and n Services svc-0… selecting it, each with port 80
// and the given type (ClusterIP, NodePort): a node whose proxy holds n Services × 3 endpoints.
func ServicesManifest(n int, serviceType string) string {
	var b strings.Builder
	b.WriteString(`apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {app: web}}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: nginx, image: nginx, ports: [{containerPort: 80}]}]}
`)
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Service\nmetadata: {name: svc-%d}\nspec: {type: %s, selector: {app: web}, ports: [{port: 80}]}\n", i, serviceType)
	}
	return b.String()
}

// measureEnv makes the test binary the parent Measure runs a command under: it runs the command it names (JSON
// argv) under GNU time and writes to the file in measureOut the peak memory (KB) time reports, the command's wall
// time and its CPU time with its descendants' (µs).
const (
	measureEnv = "K8SGUIDE_MEASURE_ARGV"
	measureOut = "K8SGUIDE_MEASURE_OUT"
)

// gnuTime is GNU time (Debian's package time), the small parent peak memory is measured under: a process's max
// RSS counts its parent's at fork (the kernel keeps the old image's high-water mark across exec), so a command
// started by the test binary would report the test binary's 20-odd MB; under time, time's 2 MB.
const gnuTime = "/usr/bin/time"

// Measure runs argv and returns its output and the peak memory (KB) of it and every process under it, as
// `/usr/bin/time -f %M` reports it.
func Measure(argv ...string) (out []byte, peakKB int64, err error) {
	fig, out, err := MeasureFigures(argv...)
	return out, fig.PeakKB, err
}

// Figures are a whole process's: its wall time, its CPU time (user and system, with every process under it)
// and the peak memory of it and every process under it.
type Figures struct {
	Wall, CPU time.Duration
	PeakKB    int64
}

// MeasureFigures runs argv as Measure does and returns its figures and its output.
func MeasureFigures(argv ...string) (Figures, []byte, error) {
	spec, _ := json.Marshal(argv)
	f, err := os.CreateTemp("", "k8sguide-measure-")
	if err != nil {
		return Figures{}, nil, err
	}
	f.Close()
	defer os.Remove(f.Name())
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), measureEnv+"="+string(spec), measureOut+"="+f.Name())
	out, err := cmd.CombinedOutput()
	data, _ := os.ReadFile(f.Name())
	var fig Figures
	var wallUS, cpuUS int64
	fmt.Sscan(string(data), &fig.PeakKB, &wallUS, &cpuUS)
	fig.Wall, fig.CPU = time.Duration(wallUS)*time.Microsecond, time.Duration(cpuUS)*time.Microsecond
	return fig, out, err
}

// Medians runs each command n times, interleaved (a, b, a, b, …: a machine that gets busier slows both), and
// returns each one's median wall time, CPU time and peak memory (each figure's own median).
func Medians(n int, cmds ...[]string) ([]Figures, error) {
	runs := make([][]Figures, len(cmds))
	for i := 0; i < n; i++ {
		for c, argv := range cmds {
			fig, out, err := MeasureFigures(argv...)
			if err != nil {
				return nil, fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, out)
			}
			runs[c] = append(runs[c], fig)
		}
	}
	medians := make([]Figures, len(cmds))
	for c, rs := range runs {
		medians[c] = Figures{
			Wall:   time.Duration(median(rs, func(f Figures) int64 { return int64(f.Wall) })),
			CPU:    time.Duration(median(rs, func(f Figures) int64 { return int64(f.CPU) })),
			PeakKB: median(rs, func(f Figures) int64 { return f.PeakKB }),
		}
	}
	return medians, nil
}

func median(rs []Figures, of func(Figures) int64) int64 {
	vs := make([]int64, len(rs))
	for i, r := range rs {
		vs[i] = of(r)
	}
	slices.Sort(vs)
	return vs[len(vs)/2]
}

// ReportFigures reports k8sguide's figures and its floor's in the units internal/benchtable puts side by side
// (ms, cpu-ms, MB; floor-ms, floor-cpu-ms, floor-MB), with the number of Services (0: none reported).
func ReportFigures(b *testing.B, services int, k8sguide, floor Figures) {
	if services > 0 {
		b.ReportMetric(float64(services), "services")
	}
	b.ReportMetric(float64(k8sguide.Wall.Microseconds())/1000, "ms")
	b.ReportMetric(float64(k8sguide.CPU.Microseconds())/1000, "cpu-ms")
	b.ReportMetric(float64(k8sguide.PeakKB)/1024, "MB")
	b.ReportMetric(float64(floor.Wall.Microseconds())/1000, "floor-ms")
	b.ReportMetric(float64(floor.CPU.Microseconds())/1000, "floor-cpu-ms")
	b.ReportMetric(float64(floor.PeakKB)/1024, "floor-MB")
}

func measured(spec string) int {
	var argv []string
	if err := json.Unmarshal([]byte(spec), &argv); err != nil || len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "bad", measureEnv)
		return 2
	}
	peak := os.Getenv(measureOut) + ".time"
	defer os.Remove(peak)
	cmd := exec.Command(gnuTime, append([]string{"-f", "%M", "-o", peak, "--"}, argv...)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	// time's last line is the figure (a command killed by a signal gets a line about it first).
	data, _ := os.ReadFile(peak)
	lines := strings.Fields(strings.TrimSpace(string(data)))
	peakKB := "0"
	if len(lines) > 0 {
		peakKB = lines[len(lines)-1]
	}
	os.WriteFile(os.Getenv(measureOut), []byte(fmt.Sprintf("%s %d %d", peakKB, wall.Microseconds(), cpu.Microseconds())), 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// InVM runs this test binary's tests that match run (a -test.run pattern) in the IPVS test VM: a kernel with
// IPVS, where they bring up netns labs with the Binary as on the host. It needs root like the other tests here,
// and skips, saying why, where the VM cannot boot (no qemu, no kernel package).
func InVM(t *testing.T, run string) {
	t.Helper()
	if vmtest.InGuest() {
		t.Skip("the VM does not boot itself")
	}
	NeedRoot(t)
	// An idle lab's control plane and proxies still take CPU time, which the emulated CPUs need: the shared labs
	// go first (a later test brings its lab up again).
	if err := downShared(); err != nil {
		t.Error(err)
	}
	took := vmtest.Boot(t, vmtest.Options{
		Modules:  vmtest.NodeModules,
		Binaries: append([]string{Binary, filepath.Join(filepath.Dir(Binary), lab.LabProgram)}, vmtest.NodeTools...),
		// The initramfs holds the test binary (about 260 MB), k8sguide (125 MB) and k8sguide-lab (250 MB), and
		// the lab runs its control plane (about 370 MB), an agent and a proxy per node and a server per pod,
		// which a second emulated CPU runs side by side.
		Memory: "3584",
		CPUs:   2,
		// A run takes about 16 minutes here; 40 leaves room to boot again after a guest that wedged (vmtest).
		Timeout: 40 * time.Minute,
		Args:    []string{"-test.run=" + run, "-test.v"},
	})
	t.Logf("VM: boot, tests and power-off took %s", took.Round(time.Millisecond))
}
