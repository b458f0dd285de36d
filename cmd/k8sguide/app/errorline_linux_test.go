package app

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/k8sguide/k8sguide/inspect/render"
)

// openPTY opens a pseudo-terminal cols wide and returns its two ends: what is written to the terminal end is
// read at the other.
func openPTY(t *testing.T, cols int) (term, other *os.File) {
	t.Helper()
	other, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal here (%v): the error line's wrapping is not checked in a terminal", err)
	}
	t.Cleanup(func() { other.Close() })
	if err := unix.IoctlSetPointerInt(int(other.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(other.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	term, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { term.Close() })
	if err := unix.IoctlSetWinsize(int(term.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: uint16(cols)}); err != nil {
		t.Fatal(err)
	}
	// Raw output: the terminal passes "\n" on as it is (no "\r\n"), so the test reads what was written.
	tio, err := unix.IoctlGetTermios(int(term.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	tio.Oflag &^= unix.OPOST
	if err := unix.IoctlSetTermios(int(term.Fd()), unix.TCSETS, tio); err != nil {
		t.Fatal(err)
	}
	return term, other
}

// A long error (the one `trace -o svg` gives without the layout program) as the user sees it.
const longError = "pictures are laid out by k8sguide-graphviz, which is not beside k8sguide nor on PATH: `make build` builds it (or set K8SGUIDE_GRAPHVIZ; -o dot prints the graph for your own Graphviz); the stack is in /tmp/k8sguide-crash-1234567890-a-very-long-file-name-that-is-longer-than-any-line-of-this-terminal.txt"

// TestErrorLineFitsTheTerminal: to a terminal, an error is wrapped at its width between words, indented under
// the message, and no word is cut (a path longer than a line has a line of its own); to a pipe it stays one line.
func TestErrorLineFitsTheTerminal(t *testing.T) {
	t.Setenv("COLUMNS", "")
	for _, cols := range []int{100, 80} {
		term, other := openPTY(t, cols)
		writeError(term, longError)
		var got []byte
		for !bytes.HasSuffix(got, []byte("\n")) {
			buf := make([]byte, 4096)
			n, err := other.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, buf[:n]...)
		}
		lines := strings.Split(strings.TrimSuffix(string(got), "\n"), "\n")
		if len(lines) < 3 {
			t.Fatalf("at %d columns the error is %d line(s): %q", cols, len(lines), got)
		}
		var words []string
		for i, l := range lines {
			if i == 0 && !strings.HasPrefix(l, "ERROR: ") || i > 0 && !strings.HasPrefix(l, errorIndent) {
				t.Errorf("line %d at %d columns is not where an error's lines start: %q", i+1, cols, l)
			}
			w := render.TextWidth(l)
			if oneWord := len(strings.Fields(strings.TrimPrefix(l, "ERROR: "))) == 1; w > cols && !oneWord {
				t.Errorf("line %d is %d columns in a %d-column terminal: %q", i+1, w, cols, l)
			}
			words = append(words, strings.Fields(strings.TrimPrefix(l, "ERROR: "))...)
		}
		if got := strings.Join(words, " "); got != longError {
			t.Errorf("the wrapped error does not say what the error says:\n got %q\nwant %q", got, longError)
		}
	}
	var pipe bytes.Buffer
	writeError(&pipe, longError)
	if got := pipe.String(); got != "ERROR: "+longError+"\n" {
		t.Errorf("to a pipe the error is not one line: %q", got)
	}
}
