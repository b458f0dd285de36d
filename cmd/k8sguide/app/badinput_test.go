package app

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestBadInputOneLine: every number and argument a user can get wrong is refused, before anything is done, in one
// line and with a non-zero status (issue 36: --check -1 accepted, lb foo printed help with status 0, --count
// 1000000000000 died of an out-of-memory stack trace, trace --dst NODE:0 named an unrelated Service).
func TestBadInputOneLine(t *testing.T) {
	fakeLabs(t, "k36")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"lb", "foo"}, `unknown subcommand "foo"`},
		{[]string{"lb"}, "needs a subcommand"},
		{[]string{"scenario", "foo"}, `unknown subcommand "foo"`},
		{[]string{"scenario"}, "needs a subcommand"},
		{[]string{"connect", "10.96.0.1:80", "--count", "1000000000000"}, "--count 1000000000000"},
		{[]string{"connect", "10.96.0.1:80", "--count", "-1"}, "--count -1"},
		{[]string{"connect", "10.96.0.1:80", "--count", "0"}, "--count 0"},
		{[]string{"connect", "10.96.0.1:80", "--parallel", "0"}, "--parallel 0"},
		{[]string{"connect", "10.96.0.1:80", "--parallel", "100000"}, "--parallel 100000"},
		{[]string{"connect", "10.96.0.1:0"}, "port 0"},
		{[]string{"connect", "10.96.0.1:80", "extra"}, "accepts 1 arg"},
		{[]string{"nodeport", "--check", "-1"}, "--check -1"},
		{[]string{"nodeport", "--check", "200000"}, "--check 200000"},
		{[]string{"nodeport", "--port", "0"}, "--port 0"},
		{[]string{"nodeport", "--port", "70000"}, "--port 70000"},
		{[]string{"nodeport", "--target-port", "-5"}, "--target-port -5"},
		{[]string{"nodeport", "--node-port", "99999"}, "--node-port 99999"},
		{[]string{"nodeport", "extra"}, "unknown command"},
		{[]string{"trace", "--dst", "172.18.0.3:0", "--node", "worker"}, "port 0"},
		{[]string{"trace", "--dst", "172.18.0.3:0", "--snapshot", "-"}, "port 0"},
		{[]string{"compare", "--snapshot", "a", "--snapshot", "b", "--dst", "172.18.0.3:0"}, "port 0"},
		{[]string{"compare", "--dataplanes", "iptables,iptables", "--dst", "172.18.0.3:80"}, "named twice"},
		{[]string{"compare", "--dst", "172.18.0.3:80", "--snapshot", "1", "--snapshot", "2", "--snapshot", "3", "--snapshot", "4",
			"--snapshot", "5", "--snapshot", "6", "--snapshot", "7", "--snapshot", "8", "--snapshot", "9"}, "at most 8"},
		{[]string{"node-ip", "--name", "a\nb"}, `invalid lab name "a\nb"`},
		{[]string{"compare", "--name", "ok", "--name", "x\x1b[2Jy", "--dst", "172.18.0.3:80"}, `invalid lab name "x\x1b[2Jy"`},
		{[]string{"trace", "--name", "a\nb", "--dst", "172.18.0.3:80"}, "invalid lab name"},
		{[]string{"node-ip", "--name", "k36", "no\nsuch"}, `no node named "no\nsuch"`},
		{[]string{"snapshot", "--name", "k36", "--node", "x\ry"}, `x\ry`},
	} {
		status, out, errOut := run(c.args...)
		if status == 0 || !strings.Contains(errOut, c.want) || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "ERROR: ") {
			t.Errorf("%q: status %d, stderr %q, stdout %q; want one ERROR line containing %q and a non-zero status", c.args, status, errOut, out, c.want)
		}
		if strings.ContainsAny(strings.TrimSuffix(errOut, "\n"), "\n\r\x1b") {
			t.Errorf("%q: a control character reached the terminal: %q", c.args, errOut)
		}
	}
	// The guard does not refuse what is fine.
	if status, out, errOut := run("lb", "--help"); status != 0 || !strings.Contains(out, "list") {
		t.Errorf("lb --help: status %d, %q %q", status, out, errOut)
	}
}

// TestErrorLine: whatever an error holds, Run prints one line of it, control characters shown as escapes.
func TestErrorLine(t *testing.T) {
	for in, want := range map[string]string{
		"no pod \"a\nb\"":          `no pod "a\nb"`,
		"dump comment \x1b[31mred": `dump comment \x1b[31mred`,
		"trailing newline\n":       "trailing newline",
		"bad byte \xff here":       `bad byte \xff here`,
		"tab\tand\u2028sep":        `tab\tand\u2028sep`,
		"plain – unicode stays":    "plain – unicode stays",
	} {
		if got := oneLine(in); got != want {
			t.Errorf("oneLine(%q) = %q, want %q", in, got, want)
		}
	}
	urlErr := &url.Error{Op: "Get", URL: "https://127.0.0.1:38211/api/v1/namespaces/default/pods?limit=500", Err: errors.New("dial tcp 127.0.0.1:38211: connect: connection refused")}
	if got := withoutRequestURLs(fmt.Errorf("listing pods: %w", urlErr).Error()); got != "listing pods: dial tcp 127.0.0.1:38211: connect: connection refused" {
		t.Errorf("client-go's URL kept: %q", got)
	}
}

// TestInterrupted: a command stopped by Ctrl-C says "interrupted" (and what it said it undid or left), not
// `context canceled` or a client-go URL, and exits 130.
func TestInterrupted(t *testing.T) {
	canceledGet := &url.Error{Op: "Get", URL: "https://127.0.0.1:38211/api/v1/pods", Err: context.Canceled}
	for err, want := range map[error]string{
		context.Canceled: "interrupted",
		canceledGet:      "interrupted",
		fmt.Errorf("waiting for service/web: %w", canceledGet):                                "interrupted: waiting for service/web",
		errors.New("interrupted; the tracing rules were removed"):                             "interrupted; the tracing rules were removed",
		errors.New("interrupted: 20, 20 of 200000 connections per node made (counted above)"): "interrupted: 20, 20 of 200000 connections per node made (counted above)",
	} {
		if got := interrupted(err); got != want {
			t.Errorf("interrupted(%q) = %q, want %q", err, got, want)
		}
	}
	// The whole path: a lab command whose context is already cancelled (Ctrl-C as it starts).
	fakeLabs(t, "k36")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, args := range [][]string{{"get", "pods"}, {"nodeport"}, {"connect", "10.96.0.1:80", "--from", "pod/web"}} {
		var out, errOut strings.Builder
		status := runContext(ctx, args, strings.NewReader(""), &out, &errOut)
		if status != ExitInterrupted || !strings.HasPrefix(errOut.String(), "ERROR: interrupted") || strings.Count(errOut.String(), "\n") != 1 ||
			strings.Contains(errOut.String(), "context canceled") || strings.Contains(errOut.String(), "https://") {
			t.Errorf("%q interrupted: status %d, stderr %q; want one line \"ERROR: interrupted…\" and status %d", args, status, errOut.String(), ExitInterrupted)
		}
	}
}

// TestPanicOneLine: a command that panics (a bug: make fuzz found `["]-A 0` pasted to trace --snapshot) says
// so in one line, keeps the stack in a private file it names, and exits 70; the lab's internal processes
// still crash with their stack, into the log their supervisor keeps.
func TestPanicOneLine(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	root := &cobra.Command{Use: "k8sguide", SilenceErrors: true, SilenceUsage: true}
	root.AddCommand(&cobra.Command{Use: "boom", RunE: func(*cobra.Command, []string) error {
		var words []string
		_ = words[1] // index out of range, as the iptables parser's was
		return nil
	}})
	root.SetArgs([]string{"boom"})
	var errOut strings.Builder
	status := execute(context.Background(), root, false, &errOut)
	line := errOut.String()
	if status != ExitInternalError || strings.Count(line, "\n") != 1 || !strings.HasPrefix(line, "ERROR: internal error") ||
		strings.Contains(line, "goroutine ") {
		t.Fatalf("status %d, stderr %q; want one line \"ERROR: internal error…\" and status %d", status, line, ExitInternalError)
	}
	stackFile := regexp.MustCompile(`the stack is in (\S+):`).FindStringSubmatch(line)
	if stackFile == nil {
		t.Fatalf("%q names no stack file", line)
	}
	fi, err := os.Stat(stackFile[1])
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("stack file %s: %v, mode %v; want 0600", stackFile[1], err, fi.Mode())
	}
	if b, _ := os.ReadFile(stackFile[1]); !strings.Contains(string(b), "index out of range") || !strings.Contains(string(b), "goroutine ") {
		t.Errorf("stack file holds %q; want the panic and its stack", b)
	}

	defer func() {
		if r := recover(); r == nil {
			t.Error("an internal command's panic was swallowed; want it to crash, stack and all")
		}
	}()
	root.SetArgs([]string{"boom"})
	execute(context.Background(), root, true, &errOut)
}

// TestJoinedErrorsOneLine: errors joined per node read as one line joined by "; " (the concurrency campaign
// printed "collecting a: signal: terminated\ncollecting b: …" as `\n` escapes); a newline of the user's own
// stays visible as an escape; two %w of one fmt.Errorf are left as they are.
func TestJoinedErrorsOneLine(t *testing.T) {
	joined := fmt.Errorf("lab l: %w", errors.Join(errors.New("collecting a: signal: terminated"), nil, errors.New("collecting b: boom")))
	if got, want := oneLine(joinedOnOneLine(joined)), "lab l: collecting a: signal: terminated; collecting b: boom"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, want := interrupted(joined), "interrupted: lab l: collecting a; collecting b: boom"; got != want {
		t.Errorf("interrupted: got %q, want %q", got, want)
	}
	user := errors.Join(errors.New(`no lab named "a\nb"`))
	if got, want := oneLine(joinedOnOneLine(user)), `no lab named "a\nb"`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	two := fmt.Errorf("x: %w\nand %w", errors.New("a"), errors.New("b"))
	if got := joinedOnOneLine(two); got != "x: a\nand b" {
		t.Errorf("two %%w: got %q", got)
	}
}
