package netns_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/internal/e2etest"
)

// TestCampaignConcurrency is the campaign's second half: what a class does to one lab at once, and Ctrl-C at
// every step. On a lab of each dataplane: two deploys, two scales, two nodeports, two `trace --verify` of one
// packet at once; SIGINT to each command that changes or probes the lab, early and late; `down` while a scale
// runs. Across labs: two `up` of one name at once, two `down` at once. A defect is what TestCampaign counts
// (a panic, a hang, an error not on one ERROR line, a control character), and besides: a command that
// failed where it had to succeed, an interrupted command that did not say so or exit 130, a trace rule left
// in a node, a lab that no longer answers after the interrupts, two labs of one name, anything left in the
// kernel after `down`.
func TestCampaignConcurrency(t *testing.T) {
	if os.Getenv(CampaignEnv) == "" {
		t.Skipf("a campaign of some 150 runs: set %s=1 (make campaign)", CampaignEnv)
	}
	needRoot(t, "iptables-restore")
	root := rootNamespace(t)
	c := &concurrencyCampaign{t: t}
	for _, d := range []dataplanes.Name{dataplanes.IPTables, dataplanes.NFTables, dataplanes.EBPF} {
		t.Run(string(d), func(t *testing.T) {
			if d == dataplanes.EBPF {
				e2etest.NeedEBPF(t)
			}
			needRoot(t, toolFor(d))
			c.oneLab(t, d)
		})
	}
	t.Run("labs", c.labs)
	if after := rootNamespace(t); after != root {
		c.defects++
		t.Errorf("the root namespace's rules, routes or forwarding changed during the campaign")
	}
	t.Logf("concurrency campaign: %d cases, %d defects (%d interrupts ended a k8sguide before its main ran)", c.cases, c.defects, c.beforeMain)
}

type concurrencyCampaign struct {
	t              *testing.T
	mu             sync.Mutex
	cases, defects int
	beforeMain     int // interrupted before k8sguide's main ran (the signal's default action)
}

// campaignRun is one command's run.
type campaignRun struct {
	args           []string
	stdout, stderr string
	code           int
	took           time.Duration
	interrupted    bool // SIGINT reached it while it ran
}

// run runs args in a directory of its own; after interruptAfter (if not 0) it sends SIGINT.
func (c *concurrencyCampaign) run(t *testing.T, args []string, interruptAfter time.Duration) campaignRun {
	ctx, cancel := context.WithTimeout(context.Background(), campaignLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, e2etest.Binary, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "COLUMNS=100")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Stdin = &o, &e, strings.NewReader("")
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	r := campaignRun{args: args}
	if interruptAfter > 0 {
		go func() {
			select {
			case <-done:
			case <-time.After(interruptAfter):
				if cmd.Process.Signal(syscall.SIGINT) == nil {
					c.mu.Lock()
					r.interrupted = true
					c.mu.Unlock()
				}
			}
		}()
	}
	err := cmd.Wait()
	close(done)
	r.stdout, r.stderr, r.code, r.took = o.String(), e.String(), cmd.ProcessState.ExitCode(), time.Since(start)
	if err != nil && r.code == 0 {
		r.code = -1
	}
	c.mu.Lock()
	c.cases++
	c.mu.Unlock()
	t.Logf("$ k8sguide %s (%s, exit %d)\n%s%s", strings.Join(args, " "), r.took.Round(time.Millisecond), r.code, r.stdout, r.stderr)
	return r
}

// together runs every args at once and returns their runs in order.
func (c *concurrencyCampaign) together(t *testing.T, argss ...[]string) []campaignRun {
	runs := make([]campaignRun, len(argss))
	var wg sync.WaitGroup
	for i, args := range argss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runs[i] = c.run(t, args, 0)
		}()
	}
	wg.Wait()
	return runs
}

func (c *concurrencyCampaign) defect(t *testing.T, r campaignRun, format string, a ...any) {
	c.mu.Lock()
	c.defects++
	c.mu.Unlock()
	t.Errorf("k8sguide %q: %s", r.args, fmt.Sprintf(format, a...))
}

// judge counts r's defects: TestCampaign's, and a failure where mustSucceed.
func (c *concurrencyCampaign) judge(t *testing.T, r campaignRun, mustSucceed bool) {
	if d := campaignDefect(r.args, r.stdout, r.stderr, r.code, r.took); d != "" {
		c.defect(t, r, "%s", d)
		return
	}
	if mustSucceed && r.code != 0 {
		c.defect(t, r, "failed (exit %d) where it had to succeed: %s", r.code, strings.TrimSpace(r.stderr))
	}
}

// judgeInterrupted: a command that SIGINT reached while it ran says "interrupted" on its one ERROR line and
// exits 130, or had finished its work (exit 0).
func (c *concurrencyCampaign) judgeInterrupted(t *testing.T, r campaignRun) {
	c.judge(t, r, false)
	if !r.interrupted || r.code == 0 {
		return
	}
	if r.code == -1 && r.stdout+r.stderr == "" && r.took < 300*time.Millisecond {
		c.mu.Lock()
		c.beforeMain++
		c.mu.Unlock()
		return
	}
	if r.code != 130 || !strings.HasPrefix(lastLine(r.stderr), "ERROR: interrupted") {
		c.defect(t, r, "interrupted: exit %d, %q; want exit 130 and \"ERROR: interrupted…\"", r.code, lastLine(r.stderr))
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// oneLab: concurrent commands and interrupts on one lab of dataplane d, then down while a scale runs.
func (c *concurrencyCampaign) oneLab(t *testing.T, d dataplanes.Name) {
	name := "cc" + string(d)[:3]
	upLab(t, name, "--dataplane", string(d))
	mustK8sguide(t, "deploy", "--name", name)
	mustK8sguide(t, "nodeport", "--name", name, "--check", "0")
	dst := "172.18.0.3:" + nodePortOf(t, name, "web")
	healthy := []string{"connect", dst, "--name", name, "--count", "6"} // exits 1 unless every one is answered
	nodes := []string{name + "-control-plane", name + "-worker", name + "-worker2"}
	kubectl := func(args ...string) []string { return append([]string{"kubectl", "--name", name, "--"}, args...) }

	for _, pair := range [][][]string{
		{{"deploy", "--name", name}, {"deploy", "--name", name}},
		{{"scale", "--name", name, "--replicas", "5"}, {"scale", "--name", name, "--replicas", "2"}},
		{{"connect", dst, "--name", name, "--count", "300"}, {"connect", dst, "--name", name, "--count", "300"}},
		{{"trace", "--name", name, "--dst", dst, "--verify"}, {"trace", "--name", name, "--dst", dst, "--verify"}},
		{{"trace", "--name", name, "--dst", dst, "--verify"}, {"connect", dst, "--name", name, "--count", "300"}},
		{{"snapshot", "--name", name, "--node", name + "-worker", "-o", "s.json"}, {"scale", "--name", name, "--replicas", "3"}},
	} {
		for _, r := range c.together(t, pair...) {
			c.judge(t, r, true)
		}
		c.judge(t, c.run(t, healthy, 0), true)
	}
	// Two nodeports at once: one exposes web, the other says it already is (as kubectl expose does).
	c.judge(t, c.run(t, kubectl("delete", "service", "web"), 0), true)
	np := []string{"nodeport", "--name", name}
	if runs := c.together(t, np, np); runs[0].code != 0 && runs[1].code != 0 {
		c.defect(t, runs[0], "neither of two nodeports at once exposed web")
	} else {
		c.judge(t, runs[0], false)
		c.judge(t, runs[1], false)
	}
	dst = "172.18.0.3:" + nodePortOf(t, name, "web")
	healthy[1] = dst
	c.judge(t, c.run(t, healthy, 0), true)
	c.noTraceRules(t, name, nodes)

	// Ctrl-C early (as the command starts), midway and late. Before some 80 ms a k8sguide process has not
	// yet run its main (the init of what it links), so the signal ends it as it would any program that has
	// done nothing yet: that is the shell's, not a defect, and is counted apart.
	for _, args := range [][]string{
		{"deploy", "--name", name},
		{"scale", "--name", name, "--replicas", "4"},
		{"nodeport", "--name", name, "--check", "10000"},
		{"connect", dst, "--name", name, "--count", "10000"},
		{"trace", "--name", name, "--dst", dst, "--verify"},
		{"snapshot", "--name", name, "--node", name + "-worker", "-o", "s.json"},
		{"compare", "--name", name, "--dst", dst},
		{"get", "pods", "--name", name},
	} {
		for _, after := range []time.Duration{150 * time.Millisecond, 400 * time.Millisecond, 1500 * time.Millisecond} {
			if args[0] == "nodeport" {
				c.run(t, kubectl("delete", "service", "web", "--ignore-not-found"), 0)
			}
			c.judgeInterrupted(t, c.run(t, args, after))
		}
	}
	if _, err := e2etest.K8sguide(t, kubectl("get", "service", "web")...); err != nil {
		c.judge(t, c.run(t, []string{"nodeport", "--name", name}, 0), true)
	}
	dst = "172.18.0.3:" + nodePortOf(t, name, "web")
	healthy[1] = dst
	c.noTraceRules(t, name, nodes)
	c.judge(t, c.run(t, []string{"scale", "--name", name, "--replicas", "3"}, 0), true)
	c.judge(t, c.run(t, healthy, 0), true)

	// down while a scale runs: down removes the lab; the scale succeeds or fails on one line.
	runs := make(chan campaignRun, 1)
	go func() { runs <- c.run(t, []string{"scale", "--name", name, "--replicas", "6"}, 0) }()
	time.Sleep(300 * time.Millisecond)
	c.judge(t, c.run(t, []string{"down", "--name", name}, 0), true)
	if r := <-runs; r.code != 0 && !strings.Contains(r.stderr, "being removed") && !strings.Contains(r.stderr, "no lab named") {
		c.defect(t, r, "failed while down removed the lab, without saying so: %s", strings.TrimSpace(r.stderr))
	} else {
		c.judge(t, r, false)
	}
	e2etest.AssertNothingLeft(t, name)
}

// noTraceRules: no node holds a tracing rule (iptables TRACE, an nftables k8sguide-trace table) after the
// verifies and their interrupts.
func (c *concurrencyCampaign) noTraceRules(t *testing.T, name string, nodes []string) {
	for _, n := range nodes {
		for _, argv := range [][]string{{"iptables-save", "-t", "raw"}, {"nft", "list", "tables"}} {
			out, _ := e2etest.K8sguide(t, append([]string{"exec", "--name", name, n, "--"}, argv...)...)
			if strings.Contains(out, "TRACE") || strings.Contains(out, "k8sguide-trace") {
				c.mu.Lock()
				c.defects++
				c.mu.Unlock()
				t.Errorf("node %s: a tracing rule is left:\n%s", n, out)
			}
		}
	}
}

// labs: two ups of one name at once make one lab; two downs at once remove it; nothing is left.
func (c *concurrencyCampaign) labs(t *testing.T) {
	const name = "ccup"
	e2etest.DownAtCleanup(t, name)
	up := []string{"up", "--name", name, "--workers", "1"}
	runs := c.together(t, up, up)
	ok := 0
	for _, r := range runs {
		c.judge(t, r, false)
		if r.code == 0 {
			ok++
		}
	}
	if ok != 1 {
		c.defect(t, runs[0], "%d of two ups of one lab at once succeeded; want one", ok)
	}
	if entries, _ := filepath.Glob(filepath.Join(e2etest.StateDir, name+"*")); len(entries) != 1 {
		c.defect(t, runs[0], "state after two ups: %v; want one lab", entries)
	}
	c.judge(t, c.run(t, []string{"get", "nodes", "--name", name}, 0), true)
	down := []string{"down", "--name", name}
	downs := c.together(t, down, down)
	for _, r := range downs {
		c.judge(t, r, false)
	}
	if downs[0].code != 0 && downs[1].code != 0 {
		c.defect(t, downs[0], "neither of two downs at once succeeded")
	}
	e2etest.AssertNothingLeft(t, name)

	// up interrupted while another up of another lab runs: the other lab is whole.
	const otherName = "ccother" // a name that does not contain the first (AssertNothingLeft matches by substring)
	other := []string{"up", "--name", otherName, "--workers", "0"}
	e2etest.DownAtCleanup(t, otherName)
	done := make(chan campaignRun, 1)
	go func() { done <- c.run(t, other, 0) }()
	c.judgeInterrupted(t, c.run(t, []string{"up", "--name", name, "--workers", "0"}, 1500*time.Millisecond))
	c.judge(t, <-done, true)
	e2etest.AssertNothingLeft(t, name)
	c.judge(t, c.run(t, []string{"get", "nodes", "--name", otherName}, 0), true)
	c.judge(t, c.run(t, []string{"down", "--name", otherName}, 0), true)
}
