// Package run runs scenarios: a fresh lab per dataplane, the steps as the k8sguide commands a student would type
// (run as subprocesses of the k8sguide binary, so what a step prints is what the command prints), the checks
// against what those commands report, and the lab taken down again.
package run

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/engines"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/scenarios"
)

// Options say how to run scenarios.
type Options struct {
	// Exe is the k8sguide binary the steps run.
	Exe string
	// Provider is up's --provider ("" lets up choose).
	Provider string
	// Image is up's --image (kind's node image; "" for kind's default).
	Image string
	// Dataplanes limits the run to these (nil: each scenario's own).
	Dataplanes []string
	// Keep leaves every lab up; KeepOnFailure only those where a check failed or a step could not run.
	Keep, KeepOnFailure bool
	// Parallel is how many labs run at once (default 1).
	Parallel int
	// Progress gets a line as each lab, step and check starts and ends (nil: quiet).
	Progress io.Writer
	// Explain, when set, walks the lesson: each step's command, its output, and what to notice.
	Explain *Explain
	// LabPrefix starts every lab's name (default "scn"), so runs side by side can keep apart.
	LabPrefix string
	// LabPerLesson gives every cell a fresh lab. Otherwise the lessons that ask for the same lab (dataplane,
	// workers, NodePort range and addresses, LB algorithm) run one after another on one lab, which the runner
	// puts back as it was between them (Keep, KeepOnFailure and Explain always give each lesson its own).
	LabPerLesson bool
	// Lab, when set, is an existing lab every cell runs on, one after another (scenario run --lab): the runner
	// neither brings it up nor takes it down, and puts it back as it found it after each scenario. A scenario
	// that asks for another lab (dataplane, workers, NodePort range and addresses, LB algorithm) does not run.
	Lab *lab.Status
}

// Explain is the classroom form of a run.
type Explain struct {
	Out io.Writer
	// Pause, when set, is called after each step (wait for Enter); an error ends the walk.
	Pause func() error
}

// Statuses of a check and of a cell (one scenario on one dataplane).
const (
	Pass   = "pass"
	Fail   = "fail"
	Error  = "error"   // the step or the lab could not run
	NotRun = "not run" // after a step that could not run
	// Known is a check that failed where the scenario says it fails today on this dataplane (and why).
	Known = "known failure"
)

// Mismatch is one expectation a check did not meet.
type Mismatch struct {
	What     string `json:"what"`
	Expected string `json:"expected"`
	Actual   string `json:"actual"`
}

// Check is the result of one checking step.
type Check struct {
	Step   int    `json:"step"` // 1-based
	Line   int    `json:"line"`
	Title  string `json:"title"`
	Kind   string `json:"kind"`
	Status string `json:"status"`
	// Differs is the reason this dataplane is held to its own expectation, when it is.
	Differs string `json:"differs,omitempty"`
	// KnownFailure is why the check fails on this dataplane today, when the scenario says it does.
	KnownFailure string     `json:"knownFailure,omitempty"`
	Mismatches   []Mismatch `json:"mismatches,omitempty"`
	Error        string     `json:"error,omitempty"`
	Command      []string   `json:"command,omitempty"`
	// Output is what the check's command printed (the trace, the connections, the object).
	Output  string  `json:"output,omitempty"`
	Seconds float64 `json:"seconds"`
}

// Cell is one scenario run on one dataplane.
type Cell struct {
	Scenario  string `json:"scenario"`
	File      string `json:"file"`
	Dataplane string `json:"dataplane"`
	Lab       string `json:"lab"`
	Status    string `json:"status"`
	Error     string `json:"error,omitempty"` // why the lab or a step could not run
	Kept      bool   `json:"kept,omitempty"`  // the lab was left up
	// Retried is why the cell ran a second time: its lab could not be made, or an action step could not run
	// (a pod that never got ready), the first time. A check that fails is never retried.
	Retried string  `json:"retried,omitempty"`
	Checks  []Check `json:"checks"`
	Started time.Time
	Seconds float64 `json:"seconds"`

	failedCheck bool // a check failed before the step that could not run
	labTaken    bool // a lab of the cell's name was up already: running again would meet it again
	notPutBack  bool // its checks ran, but the shared lab could not be put back after them
}

// Report is a whole run.
type Report struct {
	Cells []Cell `json:"cells"`
}

// ExitCode is the run's exit status: 0 when every check passed, 2 when a scenario or its lab could not run, else
// 1 (a check failed).
func (r *Report) ExitCode() int {
	code := 0
	for _, c := range r.Cells {
		switch c.Status {
		case Error:
			return 2
		case Fail:
			code = 1
		}
	}
	return code
}

// Run runs every scenario on each of its dataplanes (as limited by o.Dataplanes), o.Parallel labs at a time.
// Cancelling ctx (Ctrl-C) stops the step under way (the command gets SIGINT and cleans up after itself) and takes
// the lab down.
func Run(ctx context.Context, list []*scenarios.Scenario, o Options) *Report {
	var jobs []job
	for _, s := range list {
		for _, dp := range s.DataplanesOf() {
			if len(o.Dataplanes) > 0 && !slices.Contains(o.Dataplanes, dp) {
				continue
			}
			jobs = append(jobs, job{s, dp, len(jobs)})
		}
	}
	r := &Report{Cells: make([]Cell, len(jobs))}
	if o.Lab != nil {
		runOnLab(ctx, jobs, o, r)
		return r
	}
	par := max(o.Parallel, 1)
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for _, g := range groupJobs(jobs, o) {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if len(g.jobs) > 1 {
				runShared(ctx, g, o, r)
				return
			}
			j := g.jobs[0]
			cell := runCell(ctx, j.s, j.dp, o)
			if cell.Status == Error && !cell.failedCheck && ctx.Err() == nil && !cell.Kept && !cell.labTaken {
				first := cell.Error
				cell = runCell(ctx, j.s, j.dp, o)
				cell.Retried = first
			}
			r.Cells[j.i] = cell
		}()
	}
	wg.Wait()
	return r
}

// job is one cell to run: a scenario on a dataplane, the i-th of the report.
type job struct {
	s  *scenarios.Scenario
	dp string
	i  int
}

// labGroup is cells that run one after another on one lab: lessons that ask for the same lab.
type labGroup struct {
	jobs []job
	// lab is the group's lab name, when it has more than one cell (one cell keeps its lesson's lab name).
	lab string
}

// groupJobs puts together the cells that can share a lab, in the order of their first cell: the same dataplane
// and the same `up` (upArgs). Keep and KeepOnFailure (labs left up to explore, each with its own lesson in it)
// and Explain (a classroom walk, whose `up` the student sees) keep a lab per lesson, as LabPerLesson does.
func groupJobs(jobs []job, o Options) []labGroup {
	var groups []labGroup
	index := map[string]int{}
	for _, j := range jobs {
		key := strings.Join((&cellRun{o: o, s: j.s, dp: j.dp}).upArgs(), " ")
		if i, ok := index[key]; ok && !o.LabPerLesson && !o.Keep && !o.KeepOnFailure && o.Explain == nil {
			groups[i].jobs = append(groups[i].jobs, j)
			continue
		}
		index[key] = len(groups)
		groups = append(groups, labGroup{jobs: []job{j}})
	}
	// A shared lab is named after its dataplane, not a lesson: lessons-ipt (lessons2-ipt for a second shape).
	seen := map[string]int{}
	for i := range groups {
		if len(groups[i].jobs) < 2 {
			continue
		}
		dp := groups[i].jobs[0].dp
		seen[dp]++
		name := "lessons"
		if seen[dp] > 1 {
			name += strconv.Itoa(seen[dp])
		}
		groups[i].lab = LabName(o.LabPrefix, name, dp)
	}
	return groups
}

// LabName is the lab a scenario runs in on a dataplane: a lab name is a short DNS label.
func LabName(prefix, scenario, dataplane string) string {
	if prefix == "" {
		prefix = "scn"
	}
	face, ok := engines.Lab(dataplanes.Name(dataplane))
	short := face.Short
	if !ok { // not a dataplane: the run refuses it before it names a lab; here it must still make a DNS label
		short = "x"
	}
	room := 32 - len(prefix) - len(short) - 2
	name := scenario
	if len(name) > room {
		name = strings.TrimRight(name[:room], "-")
	}
	return prefix + "-" + name + "-" + short
}

// cellRun is the state of one cell under way.
type cellRun struct {
	o    Options
	s    *scenarios.Scenario
	dp   string
	lab  string
	labs *labState
	say  func(format string, args ...any)
}

func runCell(ctx context.Context, s *scenarios.Scenario, dp string, o Options) (cell Cell) {
	cell, c := newCell(s, dp, o, LabName(o.LabPrefix, s.Metadata.Name, dp))
	defer func() { cell.Seconds = time.Since(cell.Started).Seconds() }()
	if !c.up(ctx, &cell) {
		return cell
	}
	c.steps(ctx, &cell)
	if o.Keep || (o.KeepOnFailure && (cell.failedCheck || cell.Status == Error)) {
		cell.Kept = true
		c.say("kept: lab %s (k8sguide down --name %s)", c.lab, c.lab)
		return cell
	}
	if err := c.down(); err != nil {
		cell.Status, cell.Error = Error, fmt.Sprintf("taking the lab down: %v", err)
	}
	return cell
}

// newCell starts the record of scenario s on dataplane dp, on lab labName.
func newCell(s *scenarios.Scenario, dp string, o Options, labName string) (Cell, *cellRun) {
	cell := Cell{Scenario: s.Metadata.Name, File: s.File, Dataplane: dp, Lab: labName, Started: time.Now()}
	var mu sync.Mutex
	c := &cellRun{o: o, s: s, dp: dp, lab: labName}
	c.say = func(format string, args ...any) {
		if o.Progress == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(o.Progress, "[%s/%s] %s\n", s.Metadata.Name, dp, fmt.Sprintf(format, args...))
	}
	c.labs = &labState{c: c}
	return cell, c
}

// up brings the cell's lab up; when it cannot, it says why in cell and returns false.
func (c *cellRun) up(ctx context.Context, cell *Cell) bool {
	if _, err := c.k8sguide(ctx, "get", "nodes", "-o", "json", "--name", c.lab); err == nil {
		cell.Status, cell.Error = Error, fmt.Sprintf("a lab named %s is up already: take it down (k8sguide down --name %s) or run with --lab-prefix", c.lab, c.lab)
		cell.labTaken = true
		return false
	}
	c.say("up: lab %s", c.lab)
	c.explainCommand(c.upArgs())
	out, err := c.k8sguide(ctx, c.upArgs()...)
	c.explainOutput(out, err)
	if err != nil {
		cell.Status, cell.Error = Error, "the lab could not be made: "+err.Error()
		if ctx.Err() != nil {
			c.down() // up cleans up after itself when interrupted; this makes sure
		}
		return false
	}
	return true
}

// steps runs the cell's scenario's steps on its lab, which is up, and records the checks in cell.
func (c *cellRun) steps(ctx context.Context, cell *Cell) {
	s, o := c.s, c.o
	cell.Status = Pass
	failed := false
	for i := range s.Steps {
		st := &s.Steps[i]
		if ctx.Err() != nil {
			cell.Status, cell.Error = Error, "interrupted"
			break
		}
		c.say("step %d: %s", i+1, st.Title())
		if o.Explain != nil {
			fmt.Fprintf(o.Explain.Out, "\n── step %d: %s\n", i+1, st.Title())
		}
		if st.IsCheck() {
			ch := c.check(ctx, i, st)
			cell.Checks = append(cell.Checks, ch)
			c.say("  %s%s", ch.Status, suffix(ch))
			if o.Explain != nil {
				fmt.Fprint(o.Explain.Out, "\n"+fill(fmt.Sprintf("   check: %s%s", ch.Status, suffix(ch)), lineWidth))
			}
			switch ch.Status {
			case Fail:
				failed = true
				if cell.Status == Pass {
					cell.Status = Fail
				}
			case Error:
				cell.Status, cell.Error = Error, fmt.Sprintf("step %d (line %d) could not run: %s", i+1, st.Line, ch.Error)
			}
		} else if err := c.act(ctx, st); err != nil {
			cell.Status, cell.Error = Error, fmt.Sprintf("step %d (line %d) %s: %v", i+1, st.Line, st.Title(), err)
		}
		if st.Explain != "" && o.Explain != nil {
			fmt.Fprint(o.Explain.Out, "\n"+fill("   ▸ "+st.Explain, lineWidth))
		}
		if cell.Status == Error {
			for j := i + 1; j < len(s.Steps); j++ {
				if s.Steps[j].IsCheck() {
					cell.Checks = append(cell.Checks, Check{Step: j + 1, Line: s.Steps[j].Line, Title: s.Steps[j].Title(), Kind: s.Steps[j].Action(), Status: NotRun})
				}
			}
			break
		}
		if o.Explain != nil && o.Explain.Pause != nil {
			if err := o.Explain.Pause(); err != nil {
				cell.Status, cell.Error = Error, "stopped: "+err.Error()
				break
			}
		}
	}
	cell.failedCheck = failed
}

func suffix(ch Check) string {
	switch {
	case ch.Error != "":
		return ": " + ch.Error
	case len(ch.Mismatches) > 0:
		m := ch.Mismatches[0]
		return fmt.Sprintf(": %s: expected %s, got %s", m.What, m.Expected, m.Actual)
	case ch.Differs != "":
		return " (" + ch.Differs + ")"
	}
	return ""
}

func (c *cellRun) upArgs() []string {
	args := []string{"up", "--name", c.lab, "--dataplane", c.dp, "--workers", strconv.Itoa(c.s.WorkersOf())}
	if c.o.Provider != "" {
		args = append(args, "--provider", c.o.Provider)
	}
	if c.o.Image != "" {
		args = append(args, "--image", c.o.Image)
	}
	if r := c.s.Lab.NodePortRange; r != "" {
		args = append(args, "--service-node-port-range", r)
	}
	if a := c.s.Lab.NodePortAddresses; len(a) > 0 {
		args = append(args, "--nodeport-addresses", strings.Join(a, ","))
	}
	if face, _ := engines.Lab(dataplanes.Name(c.dp)); c.s.Lab.LBAlgorithm != "" && slices.Contains(face.LBAlgorithms, c.s.Lab.LBAlgorithm) {
		args = append(args, "--lb-algorithm", c.s.Lab.LBAlgorithm)
	}
	return args
}

// down takes the lab down, whatever the run's context says: a run interrupted must not leave it.
func (c *cellRun) down() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c.say("down: lab %s", c.lab)
	_, err := c.k8sguide(ctx, "down", "--name", c.lab)
	return err
}

// act runs an action step.
func (c *cellRun) act(ctx context.Context, st *scenarios.Step) error {
	defer c.labs.forget()
	var args []string
	var stdin []byte
	switch st.Action() {
	case "deploy":
		args = []string{"deploy", "--name", c.lab}
		if st.Deploy.File != "" || st.Deploy.Manifest != "" {
			data, err := c.s.Manifest(st.Deploy)
			if err != nil {
				return err
			}
			args = append(args, "-")
			stdin = data
		}
		if st.Deploy.Replicas != nil {
			args = append(args, "--replicas", strconv.Itoa(int(*st.Deploy.Replicas)))
		}
	case "scale":
		args = []string{"scale", st.Scale.Deployment, "--replicas", strconv.Itoa(int(st.Scale.Replicas)), "--name", c.lab}
		if st.Scale.Namespace != "" {
			args = append(args, "-n", st.Scale.Namespace)
		}
	case "expose":
		args = exposeArgs(c.lab, st.Expose)
	case "delete":
		args = []string{"kubectl", "--name", c.lab, "delete", st.Delete.Kind, st.Delete.Name}
		if st.Delete.Namespace != "" {
			args = append(args, "-n", st.Delete.Namespace)
		}
	case "wait":
		c.explainCommand([]string{"sleep", strconv.Itoa(st.Wait.Seconds)})
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(st.Wait.Seconds) * time.Second):
			return nil
		}
	default:
		return fmt.Errorf("no such action")
	}
	c.explainCommand(args)
	out, err := c.k8sguideIn(ctx, stdin, args...)
	c.explainOutput(out, err)
	return err
}

func exposeArgs(lab string, e *scenarios.Expose) []string {
	args := []string{"nodeport", "--name", lab, "--check", "0"}
	add := func(flag, v string) {
		if v != "" && v != "0" {
			args = append(args, flag, v)
		}
	}
	add("--deployment", e.Deployment)
	add("-n", e.Namespace)
	add("--service", e.Service)
	add("--port", strconv.Itoa(int(e.Port)))
	add("--target-port", strconv.Itoa(int(e.TargetPort)))
	add("--node-port", strconv.Itoa(int(e.NodePort)))
	add("--external-traffic-policy", e.ExternalTrafficPolicy)
	return args
}

func (c *cellRun) explainCommand(args []string) {
	if c.o.Explain == nil {
		return
	}
	fmt.Fprint(c.o.Explain.Out, commandLines(append([]string{"$", "k8sguide"}, quoteArgs(args)...), lineWidth))
}

// commandLines prints a command as a shell would take it, broken with a backslash before a flag where a line
// would pass width (a student copies it whole into a terminal), each flag kept with its value.
func commandLines(words []string, width int) string {
	var units []string
	for i := 0; i < len(words); i++ {
		u := words[i]
		if strings.HasPrefix(u, "-") && !strings.Contains(u, "=") && i+1 < len(words) && !strings.HasPrefix(words[i+1], "-") {
			i++
			u += " " + words[i]
		}
		units = append(units, u)
	}
	var b strings.Builder
	line := ""
	for _, u := range units {
		switch {
		case line == "":
			line = u
		case len(line)+1+len(u)+2 > width && strings.HasPrefix(u, "-"):
			b.WriteString(line + " \\\n")
			line = "    " + u
		default:
			line += " " + u
		}
	}
	return b.String() + line + "\n"
}

func (c *cellRun) explainOutput(out string, err error) {
	if c.o.Explain == nil {
		return
	}
	fmt.Fprint(c.o.Explain.Out, out)
	if err != nil {
		fmt.Fprintf(c.o.Explain.Out, "error: %v\n", err)
	}
}

func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"'$*?{}[]|&;<>()") {
			a = strconv.Quote(a)
		}
		out[i] = a
	}
	return out
}

// CommandError is a k8sguide command that failed: its exit status and the last line it wrote to stderr.
type CommandError struct {
	Args   []string
	Stderr string
	Err    error
}

func (e *CommandError) Error() string {
	if line := lastLine(e.Stderr); line != "" {
		return line
	}
	return fmt.Sprintf("k8sguide %s: %v", strings.Join(e.Args, " "), e.Err)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func (c *cellRun) k8sguide(ctx context.Context, args ...string) (string, error) {
	return c.k8sguideIn(ctx, nil, args...)
}

// k8sguideIn runs the k8sguide binary with args (argv, never a shell) and returns its standard output. On
// cancellation it gets SIGINT, as from Ctrl-C, so it removes what it made (trace rules, a half-made lab).
func (c *cellRun) k8sguideIn(ctx context.Context, stdin []byte, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.o.Exe, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) }
	cmd.WaitDelay = time.Minute
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Env = append(os.Environ(), "K8SGUIDE_PROVIDER="+c.o.Provider)
	if c.o.Provider == "" {
		cmd.Env = os.Environ()
	}
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) || ctx.Err() != nil {
			return out.String(), &CommandError{Args: args, Stderr: errb.String(), Err: err}
		}
		return out.String(), err
	}
	return out.String(), nil
}
