package render

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/mattn/go-runewidth"
	"golang.org/x/term"
)

// DefaultWidth is the width output fits when neither $COLUMNS nor a terminal says: about what a classroom
// projector shows.
const DefaultWidth = 100

// minWidth keeps a silly $COLUMNS (or a terminal a few columns wide) from shortening every cell to "…".
const minWidth = 60

// Width is the number of columns output to w should fit: $COLUMNS, else the width of the terminal w is, else
// DefaultWidth (a pipe or a file: what is read later is most often read in a terminal of about that size).
func Width(w io.Writer) int {
	if n, err := strconv.Atoi(strings.TrimSpace(os.Getenv("COLUMNS"))); err == nil && n > 0 {
		return max(n, minWidth)
	}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		if n, _, err := term.GetSize(int(f.Fd())); err == nil && n > 0 {
			return max(n, minWidth)
		}
	}
	return DefaultWidth
}

// TextWidth is the number of terminal columns s takes.
func TextWidth(s string) int { return runewidth.StringWidth(s) }

// ShortenMiddle cuts s to n columns by replacing its middle with "…": the start says what a thing is and the
// end is where names and targets are.
func ShortenMiddle(s string, n int) string {
	if TextWidth(s) <= n {
		return s
	}
	if n < 1 {
		return ""
	}
	r := []rune(s)
	head := n / 2
	tail := n - 1 - head
	for TextWidth(string(r[:head]))+1+TextWidth(string(r[len(r)-tail:])) > n && head+tail > 0 {
		if head > tail {
			head--
		} else {
			tail--
		}
	}
	return string(r[:head]) + "…" + string(r[len(r)-tail:])
}

// ShortenEnd cuts s to n columns, ending in "…": for names whose start tells them apart (KUBE-SVC-LOLE4I…).
func ShortenEnd(s string, n int) string {
	if TextWidth(s) <= n {
		return s
	}
	if n < 1 {
		return ""
	}
	return runewidth.Truncate(s, n, "…")
}

// Wrap breaks text into lines of at most width columns at spaces, the first line after first and the others
// after indent; a word longer than a line is cut in the middle.
func Wrap(first, indent, text string, width int) string {
	var b strings.Builder
	if first != "" && !strings.HasSuffix(first, " ") {
		first += " "
	}
	line, lineWidth := first, TextWidth(first)
	empty := true
	for _, word := range strings.Fields(text) {
		ww := TextWidth(word)
		if !empty && lineWidth+1+ww > width {
			b.WriteString(line + "\n")
			line, lineWidth, empty = indent, TextWidth(indent), true
		}
		if room := width - lineWidth - 1; ww > room && empty {
			word = ShortenMiddle(word, max(room, 8))
			ww = TextWidth(word)
		}
		if !empty {
			line += " "
			lineWidth++
		}
		line += word
		lineWidth += ww
		empty = false
	}
	b.WriteString(line + "\n")
	return b.String()
}

// Column says how one column of a fitted table may be shortened.
type Column struct {
	// Min is the narrowest the column gets (0: it is never shortened).
	Min int
	// Soft is how narrow the column gets before any column is cut below its Soft (0: Min): the columns
	// that matter most keep more of their text.
	Soft int
	// Shorten cuts a cell to n columns (nil: ShortenMiddle).
	Shorten func(s string, n int) string
}

// columnGap is what a fitted table puts between columns: one less than WriteTable's three, a column of text
// more for a 100-column terminal.
const columnGap = 2

// FitTable prints a WriteTable table no wider than width (a row of one cell is a section line across the
// table, e.g. a hook's name, which takes no part in the column widths): while it is too wide, the widest column that may
// still shrink loses a column, and then every cell is cut to its column's width by that column's Shorten. A
// table that cannot fit (the fixed columns alone are wider) is printed as narrow as its columns allow.
func FitTable(w io.Writer, width int, header []string, rows [][]string, cols []Column) error {
	n := len(header)
	widths := make([]int, n)
	for i, h := range header {
		widths[i] = TextWidth(h)
	}
	for _, r := range rows {
		if len(r) == 1 && n > 1 {
			continue // a section line
		}
		for i, c := range r {
			if i < n {
				widths[i] = max(widths[i], TextWidth(c))
			}
		}
	}
	total := func() int {
		t := columnGap * (n - 1)
		for _, x := range widths {
			t += x
		}
		return t
	}
	colAt := func(i int) Column {
		if i < len(cols) {
			return cols[i]
		}
		return Column{}
	}
	// Cut the column that is furthest above its floor first: first down to the soft widths, then down to
	// the minimums.
	for _, floor := range []func(Column) int{
		func(c Column) int { return max(c.Soft, c.Min) },
		func(c Column) int { return c.Min },
	} {
		for total() > width {
			best := -1
			for i := range widths {
				c := colAt(i)
				if c.Min == 0 || widths[i] <= floor(c) {
					continue
				}
				if best < 0 || widths[i]-floor(c) > widths[best]-floor(colAt(best)) {
					best = i
				}
			}
			if best < 0 {
				break
			}
			widths[best]--
		}
	}
	cut := func(i int, s string) string {
		if TextWidth(s) <= widths[i] {
			return s
		}
		if f := colAt(i).Shorten; f != nil {
			return f(s, widths[i])
		}
		return ShortenMiddle(s, widths[i])
	}
	hdr := make([]string, n)
	for i, h := range header {
		hdr[i] = cut(i, h)
	}
	out := make([][]string, len(rows))
	sections := map[int]string{}
	for j, r := range rows {
		if len(r) == 1 && n > 1 {
			sections[j] = ShortenMiddle(r[0], width)
			out[j] = make([]string, n)
			continue
		}
		out[j] = make([]string, len(r))
		for i, c := range r {
			if i < n {
				c = cut(i, c)
			}
			out[j][i] = c
		}
	}
	if len(sections) == 0 {
		return writeTable(w, strings.Repeat(" ", columnGap), hdr, out)
	}
	var buf bytes.Buffer
	if err := writeTable(&buf, strings.Repeat(" ", columnGap), hdr, out); err != nil {
		return err
	}
	lines := strings.SplitAfter(buf.String(), "\n")
	for j, text := range sections {
		if j+1 < len(lines) && strings.TrimSpace(lines[j+1]) == "" {
			lines[j+1] = text + "\n"
		}
	}
	_, err := io.WriteString(w, strings.Join(lines, ""))
	return err
}

// Count is n with its noun, plural unless n is 1: "1 replica", "3 replicas", "0 connections". The nouns
// k8sguide counts all take an s.
func Count[N ~int | ~int32 | ~int64](n N, noun string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
