// Package app assembles k8sguide's cobra commands. Each command lives in its own package with a flags struct,
// NewCommand and runE, as kind's do; the work is done by lab, dataplanes and inspect.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/k8sguide/k8sguide/cmd/k8sguide/app/scenario"

	"github.com/k8sguide/k8sguide/cmd/k8sguide/app/compare"
	"github.com/k8sguide/k8sguide/cmd/k8sguide/app/connect"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/k8sguide/k8sguide/cmd/internal/nodecommands"
	"github.com/k8sguide/k8sguide/cmd/k8sguide/app/counters"
	"github.com/k8sguide/k8sguide/cmd/k8sguide/app/deploy"
	"github.com/k8sguide/k8sguide/cmd/k8sguide/app/doctor"
	"github.com/k8sguide/k8sguide/cmd/k8sguide/app/down"
	execcmd "github.com/k8sguide/k8sguide/cmd/k8sguide/app/exec"
	"github.com/k8sguide/k8sguide/cmd/k8sguide/app/get"
	"github.com/k8sguide/k8sguide/cmd/k8sguide/app/kubectl"
	"github.com/k8sguide/k8sguide/cmd/k8sguide/app/lb"
	"github.com/k8sguide/k8sguide/cmd/k8sguide/app/nodeip"
	"github.com/k8sguide/k8sguide/cmd/k8sguide/app/nodeport"
	"github.com/k8sguide/k8sguide/cmd/k8sguide/app/scale"
	"github.com/k8sguide/k8sguide/cmd/k8sguide/app/snapshot"
	tracecmd "github.com/k8sguide/k8sguide/cmd/k8sguide/app/trace"
	"github.com/k8sguide/k8sguide/cmd/k8sguide/app/up"
	"github.com/k8sguide/k8sguide/inspect/render"
	"github.com/k8sguide/k8sguide/lab"
)

// NewCommand returns the root command.
func NewCommand(streams lab.Streams) *cobra.Command {
	root := &cobra.Command{
		Use:           "k8sguide",
		Short:         "Kubernetes Service networking labs: build one, send packets, see the path",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       versionText(),
	}
	// The whole text, not cobra's "k8sguide version …" line (--version printed the help before).
	root.SetVersionTemplate("{{.Version}}")
	fitHelp(root)
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.Err)
	root.AddCommand(
		doctor.NewCommand(streams),
		up.NewCommand(streams),
		down.NewCommand(streams),
		get.NewCommand(streams),
		deploy.NewCommand(streams),
		scale.NewCommand(streams),
		connect.NewCommand(streams),
		counters.NewCommand(streams),
		scenario.NewCommand(streams),
		nodeport.NewCommand(streams),
		nodeip.NewCommand(streams),
		execcmd.NewCommand(streams),
		kubectl.NewCommand(streams),
		snapshot.NewCommand(streams),
		tracecmd.NewCommand(streams),
		compare.NewCommand(streams),
		lb.NewCommand(streams),
		nodecommands.NewCommand(streams),
	)
	// A lab name is checked where it enters, whatever the command: it names namespaces, nodes and files, and one
	// with a newline or an escape sequence would reach the terminal and the kernel as it is.
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		return validateLabNames(cmd.Flags())
	}
	requireSubcommand(root)
	return root
}

// fitHelp makes every command's help fit width columns (cobra's own templates print each text on one line: the
// help was 147–190 columns wide). Descriptions are wrapped at spaces; pflag wraps each flag's usage under its
// description column; a command's line in a list wraps under its description. Cobra's template functions are
// global, so the width is the one of the terminal (or $COLUMNS) when the help is printed.
func fitHelp(root *cobra.Command) {
	width := func() int { return render.Width(os.Stdout) }
	cobra.AddTemplateFunc("fittedFlagUsages", func(fs *pflag.FlagSet) string {
		return strings.TrimRight(fs.FlagUsagesWrapped(width()-1), " \n")
	})
	cobra.AddTemplateFunc("fittedText", func(indent int, text string) string {
		return fitLines(text, strings.Repeat(" ", indent), width())
	})
	cobra.AddTemplateFunc("fittedCommand", func(name string, pad int, short string) string {
		first := fmt.Sprintf("  %-*s ", pad, name)
		return strings.TrimSuffix(render.Wrap(first, strings.Repeat(" ", len(first)), short, width()), "\n")
	})
	cobra.AddTemplateFunc("fittedExample", func(text string) string {
		var out []string
		width := width()
		for _, line := range strings.Split(text, "\n") {
			if render.TextWidth(line) <= width {
				out = append(out, line)
				continue
			}
			lead := line[:len(line)-len(strings.TrimLeft(line, " "))]
			wrapped := strings.Split(strings.TrimSuffix(render.Wrap(lead, lead+"  ", strings.TrimSpace(line), width-2), "\n"), "\n")
			out = append(out, strings.Join(wrapped, " \\\n"))
		}
		return strings.Join(out, "\n")
	})
	root.SetHelpTemplate(strings.Replace(root.HelpTemplate(), "{{. | trimTrailingWhitespaces}}", "{{fittedText 0 .}}", 1))
	t := root.UsageTemplate()
	for _, set := range []string{"LocalFlags", "InheritedFlags"} {
		t = strings.ReplaceAll(t, "{{."+set+".FlagUsages | trimTrailingWhitespaces}}", "{{fittedFlagUsages ."+set+"}}")
	}
	t = strings.ReplaceAll(t, "  {{rpad .Name .NamePadding }} {{.Short}}", "{{fittedCommand .Name .NamePadding .Short}}")
	t = strings.Replace(t, "  {{.UseLine}}", "{{fittedText 4 (printf \"  %s\" .UseLine)}}", 1)
	// An example is a command line to paste: a long one goes on with a backslash, as a shell reads it.
	t = strings.Replace(t, "{{.Example}}", "{{fittedExample .Example}}", 1)
	root.SetUsageTemplate(t)
}

// fitLines wraps each line of text that is wider than width at its spaces, its continuations after indent plus
// the line's own indentation. The text's own line breaks stay, but for one after a line wider than width
// followed by more of the same paragraph (an unindented line that starts no list item): a help text is written
// at 120 columns, and kept, that break would leave a line of a word or two in a 100-column terminal.
func fitLines(text, indent string, width int) string {
	var lines []string
	for _, line := range strings.Split(strings.TrimRight(text, " \n"), "\n") {
		if n := len(lines); n > 0 && render.TextWidth(lines[n-1]) > width && continuesParagraph(line) {
			lines[n-1] += " " + line
			continue
		}
		lines = append(lines, line)
	}
	var b strings.Builder
	for i, line := range lines {
		if i > 0 {
			b.WriteString("\n")
		}
		if render.TextWidth(line) <= width {
			b.WriteString(line)
			continue
		}
		lead := line[:len(line)-len(strings.TrimLeft(line, " "))]
		b.WriteString(strings.TrimSuffix(render.Wrap(lead, lead+indent, strings.TrimSpace(line), width), "\n"))
	}
	return b.String()
}

// continuesParagraph: line goes on with the prose before it: it is neither blank, indented, nor a list item.
func continuesParagraph(line string) bool {
	return line != "" && line[0] != ' ' && line[0] != '\t' && !listItem.MatchString(line)
}

// listItem is the start of a line that begins a list item: "- ", "* ", "• ", "1. ", "2) ".
var listItem = regexp.MustCompile(`^([-*•]|[0-9]+[.)]) `)

// validateLabNames checks the values of a command's --name flag (compare takes several).
func validateLabNames(fs *pflag.FlagSet) error {
	f := fs.Lookup("name")
	if f == nil || !f.Changed {
		return nil
	}
	names := []string{f.Value.String()}
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		names = sv.GetSlice()
	}
	for _, n := range names {
		if err := lab.ValidateName(n); err != nil {
			return fmt.Errorf("--name: %w", err)
		}
	}
	return nil
}

// requireSubcommand makes a command group (lb, scenario) run without a subcommand, or with one it does not
// have, an error: cobra would print the group's help and exit 0, so `lb foo` looked like it had worked.
func requireSubcommand(c *cobra.Command) {
	for _, sub := range c.Commands() {
		requireSubcommand(sub)
	}
	if !c.HasParent() || !c.HasSubCommands() || c.Runnable() {
		return
	}
	c.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("unknown subcommand %q for %q: want one of %s", args[0], cmd.CommandPath(), subcommands(cmd))
		}
		return nil
	}
	c.RunE = func(cmd *cobra.Command, args []string) error {
		return fmt.Errorf("%s needs a subcommand: %s (see %s --help)", cmd.CommandPath(), subcommands(cmd), cmd.CommandPath())
	}
}

func subcommands(c *cobra.Command) string {
	var names []string
	for _, s := range c.Commands() {
		if s.IsAvailableCommand() {
			names = append(names, s.Name())
		}
	}
	return strings.Join(names, ", ")
}

// ExitInterrupted is the exit status of a command stopped by SIGINT or SIGTERM (128+SIGINT, as a shell's).
const ExitInterrupted = 130

// Run runs k8sguide and returns its exit status. Errors are one line on stderr; `exec` passes on the exit
// status of the command it ran. SIGINT and SIGTERM cancel the command's context, so commands undo half-made work;
// the error then says it was interrupted (and what the command said it undid or left), exit status 130.
func Run(args []string, in io.Reader, out, errOut io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runContext(ctx, args, in, out, errOut)
}

// runContext is Run under ctx, whose cancellation stands for the signal.
func runContext(ctx context.Context, args []string, in io.Reader, out, errOut io.Writer) int {
	root := NewCommand(lab.Streams{In: in, Out: out, Err: errOut})
	root.SetArgs(args)
	return execute(ctx, root, len(args) > 0 && args[0] == "internal", errOut)
}

// execute runs root under ctx and returns the exit status. The lab's own processes (internal) crash as Go
// programs do, their stack into the log their supervisor keeps; a user's command says so in one line.
func execute(ctx context.Context, root *cobra.Command, internal bool, errOut io.Writer) (status int) {
	defer func() {
		if r := recover(); r != nil {
			if internal {
				panic(r)
			}
			writeError(errOut, crashed(r, debug.Stack()))
			status = ExitInternalError
		}
	}()
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	// A command run for the user (exec's, kubectl) has said what went wrong: pass its status on.
	var exitErr interface{ ExitCode() int }
	if errors.As(err, &exitErr) && exitErr.ExitCode() > 0 {
		return exitErr.ExitCode()
	}
	if ctx.Err() != nil {
		writeError(errOut, interrupted(err))
		return ExitInterrupted
	}
	writeError(errOut, errorText(err))
	return 1
}

// errorIndent is where an error's wrapped lines start: under the message, after "ERROR: ".
const errorIndent = "       "

// writeError prints msg as the error line. To a terminal it is wrapped at the terminal's width (an error is
// one message, but a 190-column line wraps mid-word at the edge, or runs off it); to a pipe or a file it stays
// one line, for the scripts and CI logs that read it.
func writeError(errOut io.Writer, msg string) {
	msg = oneLine(msg)
	if f, ok := errOut.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		msg = wrapError(msg, render.Width(f)-len(errorIndent))
	}
	fmt.Fprintf(errOut, "ERROR: %s\n", msg)
}

// wrapError breaks msg between words into lines of at most width columns, each after the first indented under
// the first; a word longer than a line (a path, a command) has a line of its own, whole, since a cut path is
// one nobody can open.
func wrapError(msg string, width int) string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(msg) {
		switch {
		case line == "":
			line = word
		case render.TextWidth(line)+1+render.TextWidth(word) <= width:
			line += " " + word
		default:
			lines = append(lines, line)
			line = word
		}
	}
	return strings.Join(append(lines, line), "\n"+errorIndent)
}

// ExitInternalError is the exit status of a command stopped by a bug of k8sguide's (EX_SOFTWARE of sysexits.h).
const ExitInternalError = 70

// crashed is the one line a command that panicked prints: a bug, not the user's doing; the stack (which the
// user is asked to report) goes to a private file rather than 40 lines over the terminal. The command's own
// deferred cleanups have run by now (the panic unwound them), so what it made is undone as on any error.
func crashed(r any, stack []byte) string {
	where := "the stack could not be kept"
	if f, err := os.CreateTemp("", "k8sguide-crash-*.txt"); err == nil { // 0600, in a fresh file
		fmt.Fprintf(f, "k8sguide %s: panic: %v\n\n%s", strings.Join(os.Args[1:], " "), r, stack)
		f.Close()
		where = "the stack is in " + f.Name()
	}
	return fmt.Sprintf("internal error (a bug in k8sguide, not in what you asked): %v; %s: please report it with the command you ran", r, where)
}

// requestURL is how client-go's errors (url.Error) start: the method and the whole request URL, which says
// nothing a user can act on ("Get \"https://127.0.0.1:38211/api/v1/namespaces/default/pods?limit=500\": ").
var requestURL = regexp.MustCompile(`\b(Get|Head|Post|Put|Patch|Delete|Options) "[a-z]+://[^"]*": `)

// errorText is what an error line says of err: errors.Join's lines joined, client-go's URLs cut.
func errorText(err error) string { return withoutRequestURLs(joinedOnOneLine(err)) }

// withoutRequestURLs reduces client-go's request errors in msg to their cause.
func withoutRequestURLs(msg string) string { return requestURL.ReplaceAllString(msg, "") }

// interrupted is the message of a command stopped by a signal: "interrupted", then whatever the command said
// besides the cancellation itself (what it undid or left, where it was).
func interrupted(err error) string {
	msg := errorText(err)
	// What the command's children died of when the signal reached them too (the group's Ctrl-C, or the
	// command ending them), said already by "interrupted".
	for _, raw := range []string{context.Canceled.Error(), context.DeadlineExceeded.Error(), "signal: killed", "signal: interrupt", "signal: terminated"} {
		msg = strings.ReplaceAll(msg, ": "+raw, "")
		msg = strings.ReplaceAll(msg, raw, "")
	}
	msg = strings.Trim(msg, " :;,")
	switch {
	case msg == "":
		return "interrupted"
	case strings.HasPrefix(msg, "interrupted"):
		return msg
	}
	return "interrupted: " + msg
}

// joinedOnOneLine is err's message with what errors.Join put on lines of their own (one per node, one per
// thing down could not remove) joined by "; " instead, so that it reads as one line and not as `\n` escapes;
// a newline of the user's own (in a name) stays, and oneLine shows it as an escape.
func joinedOnOneLine(err error) string {
	msg := err.Error()
	for e := err; e != nil; {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			var texts, parts []string
			for _, c := range j.Unwrap() {
				if c != nil {
					texts, parts = append(texts, c.Error()), append(parts, joinedOnOneLine(c))
				}
			}
			if e.Error() == strings.Join(texts, "\n") { // errors.Join's, not fmt.Errorf's with two %w
				msg = strings.Replace(msg, e.Error(), strings.Join(parts, "; "), 1)
			}
			break
		}
		e = errors.Unwrap(e)
	}
	return msg
}

// oneLine makes msg one line of plain text whatever it holds: leading and trailing space trimmed, and every
// control character (a newline in a lab or pod name, an escape sequence from a pasted dump) and invalid byte
// written as its Go escape, visibly.
func oneLine(msg string) string { return render.Visible(strings.TrimSpace(msg)) }
