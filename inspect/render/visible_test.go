package render

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/k8sguide/k8sguide/dataplanes/iptables"
	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
	"github.com/k8sguide/k8sguide/dataplanes/netstate"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/stages"
)

// hostile is a pasted dump whose comments and chain names carry terminal escape sequences (clear the screen,
// retitle the window, an 8-bit CSI, a bell) and a carriage return: printed raw, they acted on the reader's
// terminal (issue 36).
const hostile = "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SVC-\x1b[2J - [0:0]\n" +
	"-A PREROUTING -m comment --comment \"default/web\x1b]0;pwned\x07 \xc2\x9b31m\" -j KUBE-SVC-\x1b[2J\n" +
	"-A KUBE-SVC-\x1b[2J -p tcp -m comment --comment \"ok\rfake\" -j DNAT --to-destination 10.244.1.2:80\nCOMMIT\n"

func hostileTrace(t *testing.T) *trace.Trace {
	r, err := iptables.ParseSave(hostile)
	if err != nil {
		t.Fatal(err)
	}
	n := netstate.FromLocalAddresses([]netip.Addr{netip.MustParseAddr("172.18.0.3")})
	flow := trace.Flow{Src: netip.MustParseAddr("172.18.0.1"), Dst: netip.MustParseAddr("172.18.0.3"), Dport: 30080, Proto: "tcp"}
	paths, notes, _ := netfilter.Run([]netfilter.Ruleset{r}, &n, flow, netfilter.Origin{Iif: "eth0"}, nil)
	tr := &trace.Trace{Dataplane: "iptables", Node: "node\x1b[31m", Packet: trace.Packet{Src: "172.18.0.1", Dst: "172.18.0.3:30080", Proto: "tcp", From: "client"},
		Paths: paths, Notes: append(notes, "a note from the input: \x1b[1mbold"), Service: "default/web\x1b[0m:80"}
	tr.Finish()
	if !strings.Contains(tr.Paths[0].Hops[0].Text, "\x1b]0;pwned\x07") {
		t.Fatalf("the parser no longer keeps the comment as written (the test needs it): %q", tr.Paths[0].Hops[0].Text)
	}
	return tr
}

// rawControl is the first control character (but a line's end) or non-UTF-8 byte in out, "" when none.
func rawControl(out string) string {
	for i := 0; i < len(out); {
		r, n := utf8.DecodeRuneInString(out[i:])
		if r == utf8.RuneError && n == 1 || unicode.IsControl(r) && r != '\n' {
			return strings.ToValidUTF8(out[max(0, i-30):min(len(out), i+10)], "?")
		}
		i += n
	}
	return ""
}

// TestInputTextIsShownNotActedOn: every view of a trace, its verification, its stages and a comparison write the
// input's control characters as escapes (\x1b), and nothing raw but line ends.
func TestInputTextIsShownNotActedOn(t *testing.T) {
	tr := hostileTrace(t)
	views := map[string]func(*bytes.Buffer) error{
		"table":   func(b *bytes.Buffer) error { return Trace(b, tr, TraceOptions{}) },
		"wide":    func(b *bytes.Buffer) error { return Trace(b, tr, TraceOptions{Wide: true}) },
		"summary": func(b *bytes.Buffer) error { return Trace(b, tr, TraceOptions{Summary: true}) },
		"dot":     func(b *bytes.Buffer) error { _, err := b.WriteString(TraceDOT(tr)); return err },
		"explain": func(b *bytes.Buffer) error { Explain(b, 100, stages.Of(tr)); return nil },
		"verify": func(b *bytes.Buffer) error {
			return Verification(b, &trace.Verification{Prediction: tr, Result: "disagree", Reasons: []string{"kernel said \x1b[2K"}}, TraceOptions{})
		},
		"compare": func(b *bytes.Buffer) error {
			return CompareTable(b, 100, stages.Compare(stages.Question{Dst: "172.18.0.3:30080"}, []stages.Column{stages.NewColumn("lab\x1b[5m", tr)}))
		},
	}
	for name, view := range views {
		var b bytes.Buffer
		if err := view(&b); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out := b.String()
		if raw := rawControl(out); raw != "" {
			t.Errorf("%s: a raw control character near %q", name, raw)
		}
		if name != "explain" && !strings.Contains(out, `\x1b`) {
			t.Errorf("%s: the escapes are not shown:\n%s", name, out)
		}
	}
	// The trace itself is untouched: JSON, --verify and the engines need the rules as written.
	if !strings.Contains(tr.Paths[0].Hops[0].Text, "\x1b") {
		t.Error("rendering changed the trace")
	}
}

func TestVisible(t *testing.T) {
	for in, want := range map[string]string{
		"plain ascii → ünïcode":    "plain ascii → ünïcode",
		"a\x1b[2Jb":                `a\x1b[2Jb`,
		"line\nbreak\ttab\rcr":     `line\nbreak\ttab\rcr`,
		"del\x7f c1\u009b bad\xff": `del\x7f c1\u009b bad\xff`,
	} {
		if got := Visible(in); got != want {
			t.Errorf("Visible(%q) = %q, want %q", in, got, want)
		}
		if got := Visible(Visible(in)); got != Visible(in) {
			t.Errorf("Visible is not idempotent on %q", in)
		}
	}
}
