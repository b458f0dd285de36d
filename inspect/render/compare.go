package render

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"slices"
	"strings"

	"github.com/k8sguide/k8sguide/inspect/stages"
)

// compareTitleWidth is the stage column's width: titles wrap, so that the dataplanes get the room.
const compareTitleWidth = 12

// CompareTable prints a comparison as a table no wider than width: which trace each column is, then a row per
// stage (several lines, each cell wrapped to its column) with one column per dataplane.
func CompareTable(w io.Writer, width int, c *stages.Comparison) error {
	c = visible(c) // text from the input shows its control characters, never acts on the terminal
	if width <= 0 {
		width = DefaultWidth
	}
	q := c.Question
	asked := "to " + q.Dst
	if q.Service != "" {
		asked = "to Service " + q.Service + "'s NodePort on each source's node"
		if q.ClusterIP {
			asked = "to Service " + q.Service + "'s ClusterIP"
		}
	}
	io.WriteString(w, Wrap("Packet:", "  ", fmt.Sprintf("from %s %s", q.From, asked), width))
	var rows [][]string
	for _, col := range c.Columns {
		rows = append(rows, []string{col.Dataplane, col.Source, orDash(col.Node),
			fmt.Sprintf("%s %s -> %s", col.Packet.Proto, col.Packet.Src, col.Packet.Dst), col.Verdict})
	}
	if err := FitTable(w, width, []string{"DATAPLANE", "SOURCE", "NODE", "PACKET", "VERDICT"}, rows,
		[]Column{{}, {Min: 12, Soft: 24}, {Min: 12, Soft: 22}, {Min: 34}, {Min: 9}}); err != nil {
		return err
	}
	fmt.Fprintln(w)
	n := len(c.Columns)
	colWidth := (width - compareTitleWidth - columnGap*n) / max(n, 1)
	colWidth = max(colWidth, 12)
	header := []string{"STAGE"}
	for _, col := range c.Columns {
		header = append(header, strings.ToUpper(col.Dataplane))
	}
	rows = nil
	for i, h := range c.Stages {
		if i > 0 {
			rows = append(rows, make([]string, n+1))
		}
		cells := [][]string{wrapLines("", "", h.Title, compareTitleWidth)}
		for _, col := range c.Columns {
			var lines []string
			if i < len(col.Stages) {
				s := col.Stages[i]
				if s.Text != "" {
					lines = append(lines, wrapLines("", "", s.Text, colWidth)...)
				}
				for _, v := range s.Paths {
					lines = append(lines, wrapLines("•", "  ", v.Label+": "+v.Text, colWidth)...)
				}
			}
			cells = append(cells, lines)
		}
		height := 0
		for _, c := range cells {
			height = max(height, len(c))
		}
		for l := range height {
			row := make([]string, n+1)
			for j, c := range cells {
				if l < len(c) {
					row[j] = c[l]
				}
			}
			rows = append(rows, row)
		}
	}
	cols := []Column{{Min: compareTitleWidth}}
	for range c.Columns {
		cols = append(cols, Column{Min: colWidth})
	}
	return FitTable(w, width, header, rows, cols)
}

// wrapLines is Wrap's lines.
func wrapLines(first, indent, text string, width int) []string {
	return strings.Split(strings.TrimSuffix(Wrap(first, indent, text, width), "\n"), "\n")
}

//go:embed compare.html.tmpl
var compareHTML string

var compareTemplate = template.Must(template.New("compare").Parse(compareHTML))

type htmlCell struct {
	Text     string
	Variants []stages.Variant
	Guide    string
	Hops     []string
}

type htmlRow struct {
	Key, Title string
	Cells      []htmlCell
}

type htmlColumn struct {
	stages.Column
	Table string
	SVG   template.HTML // the trace's picture (TraceSVG), inline
}

// CompareHTML writes a comparison as one self-contained page (no script, no network): a grid with a row per stage
// and a column per dataplane, then each dataplane's picture of the path (drawn the same way for every one, so they
// read side by side) and its trace table.
func CompareHTML(ctx context.Context, w io.Writer, c *stages.Comparison) error {
	c = visible(c)
	view := struct {
		*stages.Comparison
		Rows []htmlRow
		Cols []htmlColumn
	}{Comparison: c}
	for _, col := range c.Columns {
		var table bytes.Buffer
		if col.Trace != nil {
			if err := Trace(&table, col.Trace, TraceOptions{Width: DefaultWidth}); err != nil {
				return err
			}
		}
		var svg []byte
		if col.Trace != nil {
			var err error
			if svg, err = TraceSVG(ctx, col.Trace); err != nil {
				return err
			}
		}
		view.Cols = append(view.Cols, htmlColumn{Column: col, Table: table.String(), SVG: inlineSVG(svg)})
	}
	for i, h := range c.Stages {
		row := htmlRow{Key: h.Key, Title: h.Title}
		for _, col := range c.Columns {
			var cell htmlCell
			if i < len(col.Stages) {
				s := col.Stages[i]
				cell = htmlCell{Text: s.Text, Variants: s.Paths, Guide: s.Guide}
				for _, r := range s.Hops {
					if !slices.Contains(cell.Hops, r.At) {
						cell.Hops = append(cell.Hops, r.At)
					}
				}
			}
			row.Cells = append(row.Cells, cell)
		}
		view.Rows = append(view.Rows, row)
	}
	return compareTemplate.Execute(w, view)
}
