package render

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"regexp"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// TraceSVG is t's picture (TraceDOT laid out by Graphviz).
func TraceSVG(ctx context.Context, t *trace.Trace) ([]byte, error) {
	return Layout(ctx, TraceDOT(t))
}

// svgPrologRE matches what comes before Graphviz's <svg> element (XML declaration, DOCTYPE): an SVG inlined in
// HTML starts at <svg>.
var svgPrologRE = regexp.MustCompile(`(?s)\A.*?(<svg\b)`)

// svgSizeRE matches the size Graphviz gives its picture, in points.
var svgSizeRE = regexp.MustCompile(`<svg width="([0-9.]+)pt" height="([0-9.]+)pt"`)

// pictureScale is the size pages draw pictures at, in CSS pixels per point (a point is 4/3 px): every picture
// of every page at one scale, so that compare's pictures can be set side by side and a box reads the same size
// in each, and one at which the smallest text (an arrow's 10 pt) is 10.7 px, legible on a projector at
// 1280×720. A picture wider than the window scrolls rather than shrinking to a size nobody can read.
const pictureScale = 4.0 / 3 * 0.8

// inlineSVG is Graphviz's SVG ready to stand inside a page: from <svg> on, sized at pictureScale. Trusted:
// Graphviz wrote it from a graph whose every label TraceDOT escaped.
func inlineSVG(svg []byte) template.HTML {
	s := svgPrologRE.ReplaceAllString(string(svg), "$1")
	s = svgSizeRE.ReplaceAllStringFunc(s, func(m string) string {
		var w, h float64
		sub := svgSizeRE.FindStringSubmatch(m)
		if _, err := fmt.Sscan(sub[1], &w); err != nil {
			return m
		}
		if _, err := fmt.Sscan(sub[2], &h); err != nil {
			return m
		}
		return fmt.Sprintf(`<svg width="%.0fpx" height="%.0fpx"`, w*pictureScale, h*pictureScale)
	})
	return template.HTML(s)
}

// pageWidth is the width the page's table is fitted to: a browser window is wider than a terminal.
const pageWidth = 120

// TraceHTML writes a self-contained page (no network, no script): the picture, the table and the JSON.
func TraceHTML(ctx context.Context, w io.Writer, t *trace.Trace) error {
	svg, err := TraceSVG(ctx, t)
	if err != nil {
		return err
	}
	var table bytes.Buffer
	if err := Trace(&table, t, TraceOptions{Width: pageWidth}); err != nil {
		return err
	}
	js, err := json.MarshalIndent(t, "", "  ") // JSON escapes control characters itself (\u001b)
	if err != nil {
		return err
	}
	t = visible(t)
	title := t.Packet.Proto + " " + t.Packet.Src + " → " + t.Packet.Dst
	if t.Service != "" {
		title += " (" + t.Service + ")"
	}
	return pageTemplate.Execute(w, map[string]any{
		"Title":     title,
		"Node":      t.Node,
		"Dataplane": t.Dataplane,
		"SVG":       inlineSVG(svg),
		"Table":     table.String(),
		"JSON":      string(js),
	})
}

var pageTemplate = template.Must(template.New("trace").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>k8sguide trace: {{.Title}}</title>
<style>
body { font-family: Helvetica, Arial, sans-serif; margin: 16px; color: #222; }
h1 { font-size: 18px; margin: 0 0 4px 0; }
p.sub { margin: 0 0 12px 0; color: #555; }
figure { margin: 0 0 16px 0; overflow-x: auto; }
figure svg { max-width: none; }
pre { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 12px; background: #f7f7f7;
      padding: 8px; overflow-x: auto; }
details { margin: 8px 0; }
summary { cursor: pointer; font-weight: bold; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<p class="sub">{{if .Node}}node {{.Node}}, {{end}}dataplane {{.Dataplane}} · made by k8sguide trace</p>
<figure id="picture">
{{.SVG}}
</figure>
<details open id="table"><summary>Every rule</summary>
<pre>{{.Table}}</pre>
</details>
<details id="json"><summary>JSON</summary>
<pre>{{.JSON}}</pre>
</details>
</body>
</html>
`))
