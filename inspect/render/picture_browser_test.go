package render_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"image/png"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/render"
	"github.com/k8sguide/k8sguide/inspect/tracer"
	"github.com/k8sguide/k8sguide/internal/graphviztest"
)

// pictureTraces are the traces the picture tests draw: a NodePort on each dataplane and a ClusterIP from a pod,
// from the golden snapshots of cmd/k8sguide/app (captured from netns labs; see its testdata/README.md).
var pictureTraces = []struct {
	name, snapshot string
	req            tracer.Request
	local          []netip.Addr // the node's addresses, for a raw dump
}{
	{"iptables-nodeport", "../../cmd/k8sguide/app/testdata/iptables-worker2.v1.json", tracer.Request{Dst: "172.18.0.4:31758"}, nil},
	{"nftables-nodeport", "../../cmd/k8sguide/app/testdata/nftables-worker2.v1.json", tracer.Request{Dst: "172.18.0.4:30666"}, nil},
	{"ipvs-nodeport", "../../dataplanes/ipvs/testdata/vm-snapshot-traced.json", tracer.Request{Dst: "172.18.0.2:30080"}, nil},
	{"ebpf-nodeport", "../../cmd/k8sguide/app/testdata/ebpf-worker2.v1.json", tracer.Request{Dst: "172.18.0.4:30464"}, nil},
	{"iptables-clusterip-from-pod", "../../cmd/k8sguide/app/testdata/iptables-worker2.v1.json", tracer.Request{Dst: "10.96.99.110:80", From: "pod/web-6b4fbbd7c4-97h9q"}, nil},
	{"nftables-clusterip-from-pod", "../../cmd/k8sguide/app/testdata/nftables-worker2.v1.json", tracer.Request{Dst: "10.96.98.206:80", From: "pod/web-6b4fbbd7c4-vdgm8"}, nil},
	// A grepped iptables-save fragment: the trace assumes the chains it lacks, and its notes say so.
	{"pasted-iptables-save-fragment", "../../dataplanes/iptables/testdata/seed001-nodeport.save", tracer.Request{Dst: "192.168.1.10:30136"}, []netip.Addr{netip.MustParseAddr("192.168.1.10")}},
}

func traceOf(t *testing.T, snapshot string, local []netip.Addr, req tracer.Request) *trace.Trace {
	t.Helper()
	s, err := tracer.LoadFile(snapshot, nil, local)
	if err != nil {
		t.Fatal(err)
	}
	if req.Proto == "" {
		req.Proto = "tcp"
	}
	if req.From == "" {
		req.From = "client"
	}
	tr, err := tracer.Trace(s, req)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func useGraphviz(t *testing.T) {
	t.Helper()
	t.Setenv(render.GraphvizEnv, graphviztest.Build(t))
}

// measureScript, added to the page for the test only, writes the boxes of the picture's parts, as the browser
// laid them out, into the DOM that --dump-dom prints.
const measureScript = `<script>
addEventListener("load", () => {
  const box = e => { const b = e.getBoundingClientRect();
    return {x: b.left + scrollX, y: b.top + scrollY, w: b.width, h: b.height}; };
  const parts = [];
  document.querySelectorAll("#picture svg g.node, #picture svg g.edge, #picture svg g.cluster").forEach(g => {
    const kind = g.classList.contains("node") ? "node" : g.classList.contains("edge") ? "edge" : "cluster";
    const shape = g.querySelector(":scope > polygon, :scope > path, :scope > ellipse");
    parts.push({kind: kind, id: g.id, title: (g.querySelector("title") || {}).textContent || "",
      shape: shape ? box(shape) : null,
      texts: Array.from(g.querySelectorAll("text")).map(t => Object.assign(box(t), {text: t.textContent}))});
  });
  const svg = document.querySelector("#picture svg");
  const out = {parts: parts, svg: box(svg), viewport: {w: innerWidth, h: innerHeight},
    page: {w: document.documentElement.scrollWidth, h: document.documentElement.scrollHeight}};
  const s = document.createElement("script");
  s.type = "application/json"; s.id = "layout-boxes"; s.textContent = JSON.stringify(out);
  document.body.appendChild(s);
});
</script>`

type rect struct {
	X, Y, W, H float64
	Text       string
}

func (r rect) String() string {
	return fmt.Sprintf("%q at (%.0f,%.0f) %.0f×%.0f", r.Text, r.X, r.Y, r.W, r.H)
}

// overlap is the area two boxes share, after giving each a tolerance of slack on every side (a glyph's box is
// taller than its ink, and adjacent lines' boxes touch).
func overlap(a, b rect, slack float64) float64 {
	w := min(a.X+a.W-slack, b.X+b.W-slack) - max(a.X+slack, b.X+slack)
	h := min(a.Y+a.H-slack, b.Y+b.H-slack) - max(a.Y+slack, b.Y+slack)
	if w <= 0 || h <= 0 {
		return 0
	}
	return w * h
}

func inside(inner, outer rect, slack float64) bool {
	return inner.X >= outer.X-slack && inner.Y >= outer.Y-slack &&
		inner.X+inner.W <= outer.X+outer.W+slack && inner.Y+inner.H <= outer.Y+outer.H+slack
}

type layout struct {
	Parts []struct {
		Kind, ID, Title string
		Shape           *rect
		Texts           []rect
	}
	SVG      rect
	Viewport struct{ W, H float64 }
	Page     struct{ W, H float64 }
}

var boxesRE = regexp.MustCompile(`(?s)<script type="application/json" id="layout-boxes">(.*?)</script>`)

// chromium finds Debian's chromium (or another Chrome) for the test.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium on PATH (apt-get install chromium; `make deps` installs it): the picture is not checked in a browser")
	return ""
}

// openInChromium loads page in headless Chromium at the window's size, and returns the screenshot and the
// layout the page's measuring script recorded.
func openInChromium(t *testing.T, browser, page string, width, height int) ([]byte, layout) {
	t.Helper()
	dir := t.TempDir()
	shot := filepath.Join(dir, "shot.png")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--hide-scrollbars", "--user-data-dir="+filepath.Join(dir, "profile"),
		fmt.Sprintf("--window-size=%d,%d", width, height),
		"--screenshot="+shot, "--dump-dom", "file://"+page)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	m := boxesRE.FindSubmatch(stdout.Bytes())
	if m == nil {
		t.Fatalf("the page's measuring script left no boxes in the DOM (chromium said: %s)", stderr.String())
	}
	var l layout
	if err := json.Unmarshal([]byte(html.UnescapeString(string(m[1]))), &l); err != nil {
		t.Fatal(err)
	}
	img, err := os.ReadFile(shot)
	if err != nil {
		t.Fatal(err)
	}
	return img, l
}

// TestPictureInChromium opens each trace's HTML page in headless Chromium and checks the picture as the browser
// drew it: every box's text inside its box, no two boxes overlapping, no arrow's label over a box or another
// label, cluster titles clear of boxes, and the whole picture on the page. It keeps the screenshots when
// K8SGUIDE_SCREENSHOTS names a folder (`make pictures` makes the README's).
func TestPictureInChromium(t *testing.T) {
	browser := chromium(t)
	useGraphviz(t)
	keep := os.Getenv("K8SGUIDE_SCREENSHOTS")
	for _, c := range pictureTraces {
		t.Run(c.name, func(t *testing.T) {
			tr := traceOf(t, c.snapshot, c.local, c.req)
			var page bytes.Buffer
			if err := render.TraceHTML(context.Background(), &page, tr); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(page.String(), "http://") && strings.Contains(page.String(), "<link") ||
				regexp.MustCompile(`<(script|img|link)\b`).MatchString(page.String()) {
				t.Fatal("the page loads something: it must be self-contained")
			}
			measured := strings.Replace(page.String(), "</body>", measureScript+"\n</body>", 1)
			file := filepath.Join(t.TempDir(), c.name+".html")
			if err := os.WriteFile(file, []byte(measured), 0o644); err != nil {
				t.Fatal(err)
			}
			// A window as wide as the picture as the page draws it, so the text is measured unscaled.
			var wpx, hpx int
			if m := regexp.MustCompile(`<svg width="(\d+)px" height="(\d+)px"`).FindStringSubmatch(page.String()); m != nil {
				fmt.Sscan(m[1], &wpx)
				fmt.Sscan(m[2], &hpx)
			}
			if wpx == 0 {
				t.Fatal("the page's picture has no size in px")
			}
			// The window holds the page's title and the picture: the screenshot is the picture the README shows.
			img, l := openInChromium(t, browser, file, wpx+64, hpx+110)
			if _, err := png.Decode(bytes.NewReader(img)); err != nil {
				t.Fatalf("screenshot: %v", err)
			}
			if keep != "" {
				if err := os.WriteFile(filepath.Join(keep, c.name+".png"), img, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			checkLayout(t, l)

			// On a projector (1280×720) the picture keeps its size and scrolls: its smallest text (an arrow's
			// label) stays at least 10 px tall, where shrinking it to the window made it 7 px.
			_, projected := openInChromium(t, browser, file, 1280, 720)
			smallest := rect{H: 1e9}
			for _, p := range projected.Parts {
				for _, tx := range p.Texts {
					if strings.TrimSpace(tx.Text) != "" && tx.H < smallest.H {
						smallest = tx
					}
				}
			}
			if smallest.H < 10 {
				t.Errorf("at 1280×720 the smallest text is %.1f px tall: %v", smallest.H, smallest)
			}
		})
	}
}

func checkLayout(t *testing.T, l layout) {
	t.Helper()
	if len(l.Parts) == 0 {
		t.Fatal("no boxes measured")
	}
	if l.Page.W > l.Viewport.W+0.5 {
		t.Errorf("the page is %.0f px wide in a %.0f px window: something falls off its right edge", l.Page.W, l.Viewport.W)
	}
	var boxes, labels, titles []rect
	nodes := 0
	for _, p := range l.Parts {
		for _, tx := range p.Texts {
			if !inside(tx, l.SVG, 1) {
				t.Errorf("%s text %v falls outside the picture %v", p.Kind, tx, l.SVG)
			}
			if tx.X < 0 || tx.Y < 0 {
				t.Errorf("%s text %v falls off the page", p.Kind, tx)
			}
		}
		switch p.Kind {
		case "node":
			nodes++
			if p.Shape == nil {
				t.Errorf("box %s has no shape", p.Title)
				continue
			}
			shape := *p.Shape
			shape.Text = p.Title
			boxes = append(boxes, shape)
			for _, tx := range p.Texts {
				if !inside(tx, shape, 1) {
					t.Errorf("text %v overflows its box %v", tx, shape)
				}
			}
		case "edge":
			labels = append(labels, p.Texts...)
		case "cluster":
			titles = append(titles, p.Texts...)
		}
	}
	if nodes < 3 {
		t.Fatalf("only %d boxes in the picture", nodes)
	}
	for i, a := range boxes {
		for _, b := range boxes[i+1:] {
			if overlap(a, b, 0) > 0 {
				t.Errorf("boxes overlap: %v and %v", a, b)
			}
		}
	}
	for i, a := range labels {
		for _, b := range boxes {
			if overlap(a, b, 1.5) > 0 {
				t.Errorf("an arrow's label lies over a box: %v over %v", a, b)
			}
		}
		for _, b := range labels[i+1:] {
			if overlap(a, b, 1.5) > 0 {
				t.Errorf("two arrows' labels overlap: %v and %v", a, b)
			}
		}
	}
	for _, a := range titles {
		for _, b := range boxes {
			if overlap(a, b, 1.5) > 0 {
				t.Errorf("a cluster's title lies over a box: %v over %v", a, b)
			}
		}
	}
}

// TestPictureSaysWhatTheTableSays: the picture of each trace has a branch per path with its chance, a box per
// endpoint, each path's DNAT to its endpoint on an arrow and the source its pod sees.
func TestPictureSaysWhatTheTableSays(t *testing.T) {
	for _, c := range pictureTraces {
		t.Run(c.name, func(t *testing.T) {
			tr := traceOf(t, c.snapshot, c.local, c.req)
			dot := render.TraceDOT(tr)
			if got := strings.Count(dot, "dnat to "); got < len(tr.Paths) {
				t.Errorf("%d paths but %d boxes say dnat to", len(tr.Paths), got)
			}
			for _, p := range tr.Paths {
				if p.Endpoint == nil {
					continue
				}
				if !strings.Contains(dot, "DNAT ") || !strings.Contains(dot, "→ "+p.Endpoint.Addr()+"<BR/>") && !strings.Contains(dot, "→ "+p.Endpoint.Addr()+">") {
					t.Errorf("no arrow says DNAT … → %s", p.Endpoint.Addr())
				}
				if !strings.Contains(dot, "pod sees source "+p.SNAT+">") && !strings.Contains(dot, "pod sees source "+p.SNAT+"<") {
					t.Errorf("no arrow says the pod %s sees source %s", p.Endpoint.Pod, p.SNAT)
				}
				if !regexp.MustCompile(`(>|<BR/>)` + regexp.QuoteMeta(p.Endpoint.Addr()) + `(<BR/>|>)`).MatchString(dot) {
					t.Errorf("no box for endpoint %s", p.Endpoint.Addr())
				}
				chance := fmt.Sprintf("%.2f%%", p.Probability*100)
				if len(tr.Paths) > 1 && !strings.Contains(dot, "label=<"+chance) && !strings.Contains(dot, "label=<Maglev share "+chance) {
					t.Errorf("no branch says %.2f%%", p.Probability*100)
				}
			}
			for _, n := range tr.Notes {
				if first, _, _ := strings.Cut(n, " "); !strings.Contains(dot, "note: "+first) {
					t.Errorf("the picture lacks the note %q", n)
				}
			}
			if strings.Count(dot, "style=dashed") < len(tr.Paths) {
				t.Errorf("fewer dashed replies than paths")
			}
		})
	}
}
