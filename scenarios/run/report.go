package run

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/jstemmer/go-junit-report/v2/junit"
	"github.com/mitchellh/go-wordwrap"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/engines"
)

// Matrix prints the scenario × dataplane matrix, then every check that did not pass with what was expected and
// what came, then the reasons behind each dataplane's own expectations.
func (r *Report) Matrix(w io.Writer) error {
	var names, dps []string
	cells := map[[2]string]*Cell{}
	for i := range r.Cells {
		c := &r.Cells[i]
		if !slices.Contains(names, c.Scenario) {
			names = append(names, c.Scenario)
		}
		if !slices.Contains(dps, c.Dataplane) {
			dps = append(dps, c.Dataplane)
		}
		cells[[2]string{c.Scenario, c.Dataplane}] = c
	}
	slices.SortFunc(dps, func(a, b string) int { return dpOrder(a) - dpOrder(b) })
	width := len("SCENARIO")
	for _, n := range names {
		width = max(width, len(n))
	}
	row := func(first string, cell func(dp string) string) {
		line := fmt.Sprintf("%-*s", width, first)
		for _, d := range dps {
			line += fmt.Sprintf("  %-14s", cell(d))
		}
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
	row("SCENARIO", strings.ToUpper)
	for _, n := range names {
		row(n, func(d string) string { return cellText(cells[[2]string{n, d}]) })
	}
	var details, reasons []string
	for _, c := range r.Cells {
		if c.Error != "" {
			details = append(details, fmt.Sprintf("%s on %s: %s", c.Scenario, c.Dataplane, c.Error))
		}
		for _, ch := range c.Checks {
			where := fmt.Sprintf("%s on %s, step %d (%s:%d) %q", c.Scenario, c.Dataplane, ch.Step, c.File, ch.Line, ch.Title)
			switch ch.Status {
			case Fail:
				for _, m := range ch.Mismatches {
					details = append(details, fmt.Sprintf("%s: %s\n    expected %s\n    got      %s", where, m.What, m.Expected, m.Actual))
				}
			case Error:
				if !strings.Contains(c.Error, ch.Error) {
					details = append(details, fmt.Sprintf("%s: could not run: %s", where, ch.Error))
				}
			}
			if ch.Status == Known {
				m := ch.Mismatches[0]
				reasons = append(reasons, fmt.Sprintf("%s on %s, step %d %q FAILS, as known:\n    %s\n    (%s: expected %s, got %s)", c.Scenario, c.Dataplane, ch.Step, ch.Title, ch.KnownFailure, m.What, m.Expected, m.Actual))
			}
			if ch.Differs != "" && ch.Status == Pass {
				reasons = append(reasons, fmt.Sprintf("%s on %s, step %d %q:\n    %s", c.Scenario, c.Dataplane, ch.Step, ch.Title, ch.Differs))
			}
		}
		if c.Retried != "" {
			details = append(details, fmt.Sprintf("%s on %s: run twice: the first time, %s", c.Scenario, c.Dataplane, c.Retried))
		}
		if c.Kept {
			details = append(details, fmt.Sprintf("%s on %s: lab %s kept (k8sguide down --name %s)", c.Scenario, c.Dataplane, c.Lab, c.Lab))
		}
	}
	if len(details) > 0 {
		fmt.Fprintln(w, "\nNot passed, or not at the first try:")
		for _, d := range details {
			fmt.Fprint(w, fill("  "+d, lineWidth))
		}
	}
	if len(reasons) > 0 {
		fmt.Fprintln(w, "\nExpected differences (pass*: the dataplane met its own expectation) and known failures")
		fmt.Fprintln(w, "(known P/N: P of N checks passed; the others fail, as the scenario says they do today):")
		for _, d := range reasons {
			fmt.Fprint(w, fill("  "+d, lineWidth))
		}
	}
	return nil
}

// lineWidth is the width the report's prose is filled to: a classroom projector's terminal.
const lineWidth = 100

// fill wraps each line of s at word boundaries to width columns, continuing a line two columns further in than
// it starts, and ends every line with a newline. A word longer than the width stays whole.
func fill(s string, width int) string {
	var b strings.Builder
	for line := range strings.Lines(strings.TrimSuffix(s, "\n") + "\n") {
		line = strings.TrimSuffix(line, "\n")
		text := strings.TrimLeft(line, " ")
		indent := line[:len(line)-len(text)]
		more := indent + "  "
		for i, l := range strings.Split(wordwrap.WrapString(text, uint(max(width-len(more), 20))), "\n") {
			prefix := more
			if i == 0 {
				prefix = indent
			}
			b.WriteString(prefix + l + "\n")
		}
	}
	return b.String()
}

// dpOrder sorts a report's dataplanes the guide's way (the engines' order).
func dpOrder(d string) int { return engines.Order(dataplanes.Name(d)) }

// cellText is one cell of the matrix: pass, pass* (a dataplane's own expectation was used), fail N/M, error.
func cellText(c *Cell) string {
	if c == nil {
		return "-"
	}
	passed, known, differs := 0, 0, false
	for _, ch := range c.Checks {
		switch ch.Status {
		case Pass:
			passed++
			differs = differs || ch.Differs != ""
		case Known:
			known++
		}
	}
	mark := ""
	if c.Retried != "" {
		mark = " (2nd)"
	}
	switch c.Status {
	case Pass:
		if known > 0 {
			return fmt.Sprintf("known %d/%d%s", passed, len(c.Checks), mark)
		}
		if differs {
			return "pass*" + mark
		}
		return "pass" + mark
	case Fail:
		return fmt.Sprintf("FAIL %d/%d%s", passed, len(c.Checks), mark)
	}
	return "ERROR" + mark
}

// JUnit is the run as JUnit XML: a testsuite per scenario × dataplane, a testcase per check (with the command and
// its output in system-out), and a testcase "lab" that errs when the lab or a step could not run.
func (r *Report) JUnit() junit.Testsuites {
	var suites junit.Testsuites
	host, _ := os.Hostname()
	for _, c := range r.Cells {
		s := junit.Testsuite{Name: c.Scenario + "/" + c.Dataplane, Hostname: host, Time: seconds(c.Seconds)}
		s.SetTimestamp(c.Started)
		s.AddProperty("dataplane", c.Dataplane)
		s.AddProperty("file", c.File)
		s.AddProperty("lab", c.Lab)
		if c.Retried != "" {
			s.AddProperty("retried", c.Retried)
		}
		for _, ch := range c.Checks {
			tc := junit.Testcase{Name: fmt.Sprintf("step %d: %s", ch.Step, ch.Title), Classname: c.Scenario + "." + c.Dataplane, Time: seconds(ch.Seconds)}
			var out strings.Builder
			if len(ch.Command) > 0 {
				fmt.Fprintf(&out, "$ %s\n", strings.Join(quoteArgs(ch.Command), " "))
			}
			out.WriteString(ch.Output)
			if ch.Differs != "" {
				fmt.Fprintf(&out, "\nthis dataplane's own expectation: %s\n", ch.Differs)
			}
			if out.Len() > 0 {
				tc.SystemOut = &junit.Output{Data: out.String()}
			}
			switch ch.Status {
			case Fail:
				var lines []string
				for _, m := range ch.Mismatches {
					lines = append(lines, fmt.Sprintf("%s: expected %s, got %s", m.What, m.Expected, m.Actual))
				}
				tc.Failure = &junit.Result{Message: lines[0], Type: "mismatch", Data: strings.Join(lines, "\n")}
			case Error:
				tc.Error = &junit.Result{Message: ch.Error, Type: "error"}
			case NotRun:
				tc.Skipped = &junit.Result{Message: "not run: an earlier step could not run"}
			case Known:
				// As pytest reports an xfail: skipped, with why, and the mismatch.
				m := ch.Mismatches[0]
				tc.Skipped = &junit.Result{Message: fmt.Sprintf("known failure: %s (%s: expected %s, got %s)", ch.KnownFailure, m.What, m.Expected, m.Actual)}
			}
			s.AddTestcase(tc)
		}
		if c.Error != "" {
			s.AddTestcase(junit.Testcase{Name: "lab", Classname: c.Scenario + "." + c.Dataplane, Error: &junit.Result{Message: c.Error, Type: "error"}})
		}
		suites.AddSuite(s)
	}
	return suites
}

func seconds(s float64) string { return strconv.FormatFloat(s, 'f', 3, 64) }
