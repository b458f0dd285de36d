package run

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/util/jsonpath"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/render"
	"github.com/k8sguide/k8sguide/scenarios"
)

// ConnectOutput is what `k8sguide connect -o json` prints.
type ConnectOutput struct {
	From        string             `json:"from"`
	Dst         string             `json:"dst"`
	Connections []trace.Connection `json:"connections"`
}

// Expected is what a check's expectations are measured against in the lab as it is: the endpoints a pod set names,
// the addresses "node" and "client" stand for.
type Expected struct {
	// Pods is the pod set, resolved (namespace/name); nil when the expectation names none.
	Pods []string
	// NodeAddrs are the addresses of the node the packet is sent to or traced on.
	NodeAddrs []string
	// Sender is the address the packet leaves its sender with; SenderPod the sending pod (namespace/name), if
	// a pod sends, and SenderNodeAddrs the addresses of its node.
	Sender          string
	SenderPod       string
	SenderNodeAddrs []string
	// Source is a source given by address (a reference, expanded).
	Source string
	// LocalPods are the Service's ready pods (namespace/name) on the node the packet is sent to or traced on.
	LocalPods []string
}

// CheckConnect measures connections against an expectation. A pod answers with its name (its hostname), so pods
// are compared by name.
func CheckConnect(want scenarios.ConnectExpect, x Expected, out ConnectOutput) []Mismatch {
	var ms []Mismatch
	if x.Pods != nil {
		names := []string{}
		for _, p := range x.Pods {
			names = append(names, podName(p))
		}
		x.Pods = names
	}
	x.SenderPod = podName(x.SenderPod)
	local := map[string]bool{}
	for _, p := range x.LocalPods {
		local[podName(p)] = true
	}
	// The pod says the address and port it saw; the port is the (translated) source port, not checked.
	conns := slices.Clone(out.Connections)
	for i := range conns {
		if ap, err := netip.ParseAddrPort(conns[i].Client); err == nil {
			conns[i].Client = ap.Addr().String()
		}
	}
	out.Connections = conns
	answered := 0
	seen := map[string]int{}
	var sources []string
	var errs []string
	for _, c := range out.Connections {
		if !c.Answered {
			if !slices.Contains(errs, c.Error) {
				errs = append(errs, c.Error)
			}
			continue
		}
		answered++
		seen[c.Pod]++
		if !slices.Contains(sources, c.Client) {
			sources = append(sources, c.Client)
		}
	}
	if a := want.Answered; a != nil {
		n := a.N
		switch a.Word {
		case "all":
			n = len(out.Connections)
		case "none":
			n = 0
		}
		if answered != n {
			actual := fmt.Sprintf("%d of %d", answered, len(out.Connections))
			if len(errs) > 0 {
				actual += " (" + strings.Join(errs, "; ") + ")"
			}
			ms = append(ms, Mismatch{What: "answered", Expected: fmt.Sprintf("%s (%d of %d)", a, n, len(out.Connections)), Actual: actual})
		}
	}
	if want.Pods != nil && want.Pods.Word != "one" {
		var got []string
		for p := range seen {
			got = append(got, p)
		}
		if m, ok := sameSet("pods that answered", want.Pods.String(), x.Pods, got); !ok {
			ms = append(ms, m)
		}
	}
	if want.Pods != nil && want.Pods.Word == "one" && len(seen) != 1 {
		var got []string
		for p := range seen {
			got = append(got, p)
		}
		slices.Sort(got)
		ms = append(ms, Mismatch{What: "pods that answered", Expected: "one: the same endpoint every time", Actual: orNone(got)})
	}
	if want.Source != "" && answered > 0 {
		var expected string
		var ok func(c trace.Connection) bool
		switch want.Source {
		case "client":
			expected = fmt.Sprintf("client: the sender's own address %s", x.Sender)
			ok = func(c trace.Connection) bool { return c.Client == x.Sender }
		case "node":
			expected = "node: an address of the node (" + strings.Join(x.NodeAddrs, " or ") + ")"
			ok = func(c trace.Connection) bool { return slices.Contains(x.NodeAddrs, c.Client) }
		case "hairpin":
			expected = fmt.Sprintf("hairpin: the sender's own address %s, or where %s answered itself an address of its node (%s)", x.Sender, x.SenderPod, strings.Join(x.SenderNodeAddrs, " or "))
			ok = func(c trace.Connection) bool {
				if c.Pod == x.SenderPod {
					return slices.Contains(x.SenderNodeAddrs, c.Client)
				}
				return c.Client == x.Sender
			}
		case "hairpin:" + strings.TrimPrefix(want.Source, "hairpin:"):
			self := strings.TrimPrefix(want.Source, "hairpin:")
			expected = fmt.Sprintf("%s: the sender's own address %s, or where %s answered itself %s", want.Source, x.Sender, x.SenderPod, self)
			ok = func(c trace.Connection) bool {
				if c.Pod == x.SenderPod {
					return c.Client == self
				}
				return c.Client == x.Sender
			}
		case "remote":
			expected = fmt.Sprintf("remote: the sender's own address %s at the node's own pods, an address of the node (%s) at pods elsewhere", x.Sender, strings.Join(x.NodeAddrs, " or "))
			ok = func(c trace.Connection) bool {
				if local[c.Pod] {
					return c.Client == x.Sender
				}
				return slices.Contains(x.NodeAddrs, c.Client)
			}
		default:
			expected = x.Source
			ok = func(c trace.Connection) bool { return c.Client == x.Source }
		}
		var bad []string
		for _, c := range out.Connections {
			if c.Answered && !ok(c) {
				if s := c.Pod + " saw " + c.Client; !slices.Contains(bad, s) {
					bad = append(bad, s)
				}
			}
		}
		if len(bad) > 0 {
			ms = append(ms, Mismatch{What: "source the pods saw", Expected: expected, Actual: strings.Join(bad, ", ")})
		}
	}
	return ms
}

// TraceOutput is a trace, and the verification when the check asked for one.
type TraceOutput struct {
	Trace        *trace.Trace
	Verification *trace.Verification
}

// CheckTrace measures a trace against an expectation.
func CheckTrace(want scenarios.TraceExpect, x Expected, out TraceOutput) []Mismatch {
	var ms []Mismatch
	t := out.Trace
	if want.Verdict != "" && t.Verdict != want.Verdict {
		ms = append(ms, Mismatch{What: "verdict", Expected: want.Verdict, Actual: t.Verdict})
	}
	if want.Endpoints != nil {
		var got []string
		for _, e := range t.Endpoints {
			got = append(got, orAddr(e))
		}
		if m, ok := sameSet("endpoints", want.Endpoints.String(), x.Pods, got); !ok {
			ms = append(ms, m)
		}
	}
	if c := want.Chances; c != nil {
		if m, ok := checkChances(*c, t.Endpoints); !ok {
			ms = append(ms, m)
		}
	}
	if want.SNAT != "" {
		src, _, _ := strings.Cut(t.Packet.Src, ":")
		expected := "node: an address of the node (" + strings.Join(x.NodeAddrs, " or ") + ")"
		switch want.SNAT {
		case "none":
			expected = "none: the packet's own source " + src
		case "hairpin":
			expected = "hairpin: the packet's own source " + src + ", but on the path back to the sender an address of the node (" + strings.Join(x.NodeAddrs, " or ") + ")"
		case "hairpin:" + strings.TrimPrefix(want.SNAT, "hairpin:"):
			expected = want.SNAT + ": the packet's own source " + src + ", but on the path back to the sender " + strings.TrimPrefix(want.SNAT, "hairpin:")
		case "remote":
			expected = "remote: the packet's own source " + src + " at the node's own pods, an address of the node (" + strings.Join(x.NodeAddrs, " or ") + ") at pods elsewhere"
		}
		var all []string
		bad := false
		for _, p := range t.Paths {
			if p.Verdict != trace.Delivered {
				continue
			}
			snat, _, _ := strings.Cut(p.SNAT, ":")
			to := ""
			if p.Endpoint != nil {
				to = p.Endpoint.IP
			}
			all = append(all, fmt.Sprintf("%s (to %s)", snat, cmp.Or(to, "?")))
			switch want.SNAT {
			case "node":
				bad = bad || !slices.Contains(x.NodeAddrs, snat)
			case "none":
				bad = bad || snat != src
			case "hairpin":
				if to == src {
					bad = bad || !slices.Contains(x.NodeAddrs, snat)
				} else {
					bad = bad || snat != src
				}
			case "hairpin:" + strings.TrimPrefix(want.SNAT, "hairpin:"):
				if to == src {
					bad = bad || snat != strings.TrimPrefix(want.SNAT, "hairpin:")
				} else {
					bad = bad || snat != src
				}
			case "remote":
				if p.Endpoint != nil && slices.Contains(x.LocalPods, p.Endpoint.Pod) {
					bad = bad || snat != src
				} else {
					bad = bad || !slices.Contains(x.NodeAddrs, snat)
				}
			}
		}
		if bad {
			ms = append(ms, Mismatch{What: "source the endpoints see", Expected: expected, Actual: strings.Join(slices.Compact(all), ", ")})
		} else if len(all) == 0 {
			ms = append(ms, Mismatch{What: "source the endpoints see", Expected: expected, Actual: "no path delivers the packet"})
		}
	}
	for _, n := range want.Notes {
		if !slices.ContainsFunc(t.Notes, func(s string) bool { return strings.Contains(s, n) }) {
			actual := "notes: " + strings.Join(t.Notes, " | ")
			if len(t.Notes) == 0 {
				actual = "no notes"
			}
			ms = append(ms, Mismatch{What: "note", Expected: strconv.Quote(n), Actual: actual})
		}
	}
	if want.Verify != "" {
		switch v := out.Verification; {
		case v == nil:
			ms = append(ms, Mismatch{What: "verify", Expected: want.Verify, Actual: "no verification"})
		case v.Result != want.Verify:
			ms = append(ms, Mismatch{What: "verify", Expected: want.Verify, Actual: v.Result + ": " + strings.Join(v.Reasons, "; ")})
		}
	}
	return ms
}

func podName(p string) string {
	_, name, ok := strings.Cut(p, "/")
	if !ok {
		return p
	}
	return name
}

func orAddr(e trace.Endpoint) string {
	if e.Pod != "" {
		return e.Pod
	}
	return e.Addr()
}

func checkChances(c scenarios.Chances, eps []trace.Endpoint) (Mismatch, bool) {
	var got []string
	for _, e := range eps {
		s := strconv.FormatFloat(e.Probability, 'f', 4, 64)
		if e.Turn > 0 {
			s += fmt.Sprintf(" (turn %d)", e.Turn)
		}
		got = append(got, s)
	}
	actual := "[" + strings.Join(got, ", ") + "]"
	if len(eps) == 0 {
		actual = "no endpoints"
	}
	switch c.Word {
	case "equal":
		for _, e := range eps {
			if math.Abs(e.Probability-1/float64(len(eps))) > 1e-6 {
				return Mismatch{What: "chances", Expected: fmt.Sprintf("equal: 1/%d each", len(eps)), Actual: actual}, false
			}
		}
		if len(eps) == 0 {
			return Mismatch{What: "chances", Expected: "equal", Actual: actual}, false
		}
		return Mismatch{}, true
	case "rr":
		turns := map[int]bool{}
		for _, e := range eps {
			if e.Turn < 1 || turns[e.Turn] {
				return Mismatch{What: "chances", Expected: "rr: a round-robin turn for each endpoint", Actual: actual}, false
			}
			turns[e.Turn] = true
		}
		if len(eps) == 0 {
			return Mismatch{What: "chances", Expected: "rr: a round-robin turn for each endpoint", Actual: actual}, false
		}
		return Mismatch{}, true
	}
	probs := make([]float64, len(eps))
	for i, e := range eps {
		probs[i] = e.Probability
	}
	slices.SortFunc(probs, func(a, b float64) int { return cmp.Compare(b, a) })
	ok := len(probs) == len(c.List)
	for i := 0; ok && i < len(probs); i++ {
		ok = math.Abs(probs[i]-c.List[i]) <= 1e-3
	}
	if !ok {
		return Mismatch{What: "chances", Expected: fmt.Sprint(c.List), Actual: actual}, false
	}
	return Mismatch{}, true
}

// sameSet compares the pods expected with those seen.
func sameSet(what, named string, want, got []string) (Mismatch, bool) {
	w := slices.Clone(want)
	g := slices.Clone(got)
	slices.Sort(w)
	slices.Sort(g)
	w, g = slices.Compact(w), slices.Compact(g)
	if slices.Equal(w, g) {
		return Mismatch{}, true
	}
	return Mismatch{What: what, Expected: named + ": " + orNone(w), Actual: orNone(g)}, false
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// CheckObject measures a field of an object (its JSON) against an expectation.
func CheckObject(c *scenarios.ObjectCheck, object []byte) ([]Mismatch, error) {
	v, err := objectField(c.Path, object)
	if err != nil {
		return nil, err
	}
	return compareField(c, v)
}

// objectField is what a kubectl JSONPath template prints of an object (its JSON).
func objectField(path string, object []byte) (string, error) {
	var obj any
	if err := json.Unmarshal(object, &obj); err != nil {
		return "", fmt.Errorf("the object: %v", err)
	}
	jp := jsonpath.New("path")
	if err := jp.Parse(path); err != nil {
		return "", fmt.Errorf("path %s: %v", path, err)
	}
	var buf bytes.Buffer
	if err := jp.Execute(&buf, obj); err != nil {
		return "", fmt.Errorf("path %s: %v", path, err)
	}
	return buf.String(), nil
}

// compareField measures a field's value against the check's expectation.
func compareField(c *scenarios.ObjectCheck, v string) ([]Mismatch, error) {
	e := c.Expect
	switch {
	case e.Equals != nil:
		if v != *e.Equals {
			return []Mismatch{{What: c.Path, Expected: strconv.Quote(*e.Equals), Actual: strconv.Quote(v)}}, nil
		}
	case len(e.Between) == 2:
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < e.Between[0] || n > e.Between[1] {
			return []Mismatch{{What: c.Path, Expected: fmt.Sprintf("a number from %d to %d", e.Between[0], e.Between[1]), Actual: strconv.Quote(v)}}, nil
		}
	case e.Matches != "":
		re, err := regexp.Compile(e.Matches)
		if err != nil {
			return nil, fmt.Errorf("matches: %v", err)
		}
		if !re.MatchString(v) {
			return []Mismatch{{What: c.Path, Expected: "to match " + e.Matches, Actual: strconv.Quote(v)}}, nil
		}
	}
	return nil, nil
}

// check runs a checking step.
func (c *cellRun) check(ctx context.Context, i int, st *scenarios.Step) (ch Check) {
	start := time.Now()
	ch = Check{Step: i + 1, Line: st.Line, Title: st.Title(), Kind: st.Action()}
	defer func() {
		ch.Seconds = time.Since(start).Seconds()
		switch {
		case ch.Error != "":
			ch.Status = Error
		case len(ch.Mismatches) > 0 && ch.KnownFailure != "":
			ch.Status = Known
		case len(ch.Mismatches) > 0:
			ch.Status = Fail
		case ch.KnownFailure != "":
			// Strict, as pytest's xfail_strict: a known failure that passes means the file is out of date.
			ch.Status = Fail
			ch.Mismatches = []Mismatch{{What: "known failure", Expected: "to fail: " + ch.KnownFailure, Actual: "it passed: take known out of the scenario"}}
		default:
			ch.Status = Pass
		}
	}()
	var err error
	switch ch.Kind {
	case "connect":
		err = c.checkConnect(ctx, st.Connect, &ch)
	case "trace":
		err = c.checkTrace(ctx, st.Trace, &ch)
	case "object":
		err = c.checkObject(ctx, st.Object, &ch)
	case "expose":
		err = c.checkRefusal(ctx, st.Expose, &ch)
	}
	if err != nil {
		ch.Error = err.Error()
	}
	return ch
}

// run runs a check's command, recording it and its output. Explaining, it shows the command as a student would
// type it (without -o json), and what it said when it failed; show prints what it printed.
func (c *cellRun) run(ctx context.Context, ch *Check, args ...string) (string, error) {
	ch.Command = append([]string{"k8sguide"}, args...)
	c.explainCommand(withoutJSON(args))
	out, err := c.k8sguide(ctx, args...)
	ch.Output = out
	if err != nil {
		c.explainOutput(out, err)
	}
	return out, err
}

// show prints, explaining, what a check's command prints without -o json: the command's own renderer, on the
// output the check has parsed (the JSON itself, should the renderer fail).
func (c *cellRun) show(ch *Check, print func(w io.Writer) error) {
	if c.o.Explain == nil {
		return
	}
	if err := print(c.o.Explain.Out); err != nil {
		fmt.Fprint(c.o.Explain.Out, ch.Output)
	}
}

func withoutJSON(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == "-o" && i+1 < len(args) && args[i+1] == "json" {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// serviceOf is the Service a check's address names (by reference), "" when none.
func serviceOf(s string) string {
	refs, _ := scenarios.Refs(s)
	for _, r := range refs {
		if r.What == "service" {
			return r.Name
		}
	}
	return ""
}

// nodeOf is the node a check's address names (by reference), "" when none.
func nodeOf(s string) string {
	refs, _ := scenarios.Refs(s)
	for _, r := range refs {
		if r.What == "node" {
			return r.Name
		}
	}
	return ""
}

// expected resolves a pod set and the node addresses for a check: node is the node the packet is sent to or
// traced on (short name).
func (c *cellRun) expected(ctx context.Context, set *scenarios.PodSet, service, node string) (Expected, error) {
	var x Expected
	if err := c.labs.load(ctx); err != nil {
		return x, err
	}
	if node != "" {
		addrs, err := c.labs.nodeAddrs(node)
		if err != nil {
			return x, err
		}
		x.NodeAddrs = addrs
	}
	if node != "" && service != "" {
		for _, e := range c.labs.endpoints(service) {
			if e.Node == c.labs.nodeName(node) {
				x.LocalPods = append(x.LocalPods, e.Pod)
			}
		}
	}
	if set == nil {
		return x, nil
	}
	if set.Word == "one" {
		set = &scenarios.PodSet{Word: "all"}
	}
	if set.Word == "none" {
		x.Pods = []string{}
		return x, nil
	}
	if service == "" {
		return x, fmt.Errorf("a pod set needs the Service: name it by reference (${service.NAME.…}) in the address")
	}
	x.Pods = []string{}
	for _, e := range c.labs.endpoints(service) {
		switch {
		case set.Word == "all",
			set.Word == "local" && node != "" && e.Node == c.labs.nodeName(node),
			slices.ContainsFunc(set.Nodes, func(n string) bool { return e.Node == c.labs.nodeName(n) }):
			x.Pods = append(x.Pods, e.Pod)
		}
	}
	if set.Word == "local" && node == "" {
		return x, fmt.Errorf("local: name the node the packet is sent to (${node.NODE} in the address, or node:)")
	}
	return x, nil
}

func (c *cellRun) checkConnect(ctx context.Context, cc *scenarios.Connect, ch *Check) error {
	want, differs, known := scenarios.ForDataplane(cc.Expect, cc.Dataplanes, c.o.Provider, c.dp)
	ch.Differs, ch.KnownFailure = differs, known
	to, err := c.labs.expand(ctx, cc.To)
	if err != nil {
		return err
	}
	from, err := c.labs.place(ctx, cc.From)
	if err != nil {
		return err
	}
	node := nodeOf(cc.To)
	if node == "" {
		node = from.node
	}
	x, err := c.expected(ctx, want.Pods, serviceOf(cc.To), node)
	if err != nil {
		return err
	}
	x.Sender = from.addr
	if from.pod != "" {
		x.SenderPod = from.pod
		if x.SenderNodeAddrs, err = c.labs.nodeAddrs(from.node); err != nil {
			return err
		}
	}
	if want.Source != "" && want.Source != "client" && want.Source != "node" {
		if x.Source, err = c.labs.expand(ctx, want.Source); err != nil {
			return err
		}
	}
	if want.Source == "node" && node == "" {
		return fmt.Errorf("source: node: name the node the connections are sent to (${node.NODE} in to)")
	}
	count := cc.Count
	if count == 0 {
		count = 10
	}
	// Connections go 8 at a time (a lesson whose connections time out is not 3 s each), except where the lesson
	// is that one connection follows the last (pods: one, session affinity).
	parallel := "8"
	if want.Pods != nil && want.Pods.Word == "one" {
		parallel = "1"
	}
	args := append([]string{"connect", to, "--count", strconv.Itoa(count), "--parallel", parallel, "-o", "json", "--name", c.lab}, from.args...)
	out, err := c.run(ctx, ch, args...)
	if err != nil {
		return err
	}
	var res ConnectOutput
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		return fmt.Errorf("connect -o json: %v", err)
	}
	c.show(ch, func(w io.Writer) error { return render.Connections(w, res.From, res.Dst, res.Connections) })
	ch.Mismatches = CheckConnect(want, x, res)
	return nil
}

func (c *cellRun) checkTrace(ctx context.Context, tc *scenarios.TraceCheck, ch *Check) error {
	want, differs, known := scenarios.ForDataplane(tc.Expect, tc.Dataplanes, c.o.Provider, c.dp)
	ch.Differs, ch.KnownFailure = differs, known
	dst, err := c.labs.expand(ctx, tc.Dst)
	if err != nil {
		return err
	}
	from := tc.From
	if from == "node" {
		from = "node/" + cmp.Or(tc.Node, nodeOf(tc.Dst))
	}
	pl, err := c.labs.place(ctx, from)
	if err != nil {
		return err
	}
	node := tc.Node
	if pl.node != "" && node == "" {
		node = pl.node
	}
	if node == "" {
		node = nodeOf(tc.Dst)
	}
	args := []string{"trace", "--dst", dst, "-o", "json", "--name", c.lab}
	args = append(args, pl.args...)
	if node != "" && !slices.Contains(pl.args, "--node") {
		args = append(args, "--node", c.labs.nodeName(node))
	}
	if tc.Src != "" {
		src, err := c.labs.expand(ctx, tc.Src)
		if err != nil {
			return err
		}
		args = append(args, "--src", src)
	}
	if tc.Proto != "" {
		args = append(args, "--proto", tc.Proto)
	}
	if tc.Verify {
		args = append(args, "--verify")
	}
	x, err := c.expected(ctx, want.Endpoints, serviceOf(tc.Dst), node)
	if err != nil {
		return err
	}
	out, runErr := c.run(ctx, ch, args...)
	if runErr != nil && !(tc.Verify && out != "") {
		return runErr
	}
	var res TraceOutput
	if tc.Verify {
		var v trace.Verification
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			return fmt.Errorf("trace --verify -o json: %v", err)
		}
		res = TraceOutput{Trace: v.Prediction, Verification: &v}
	} else {
		var t trace.Trace
		if err := json.Unmarshal([]byte(out), &t); err != nil {
			return fmt.Errorf("trace -o json: %v", err)
		}
		res = TraceOutput{Trace: &t}
	}
	if res.Trace == nil {
		return fmt.Errorf("trace -o json printed no prediction")
	}
	if runErr == nil {
		c.show(ch, func(w io.Writer) error {
			if res.Verification != nil {
				return render.Verification(w, res.Verification, render.TraceOptions{})
			}
			return render.Trace(w, res.Trace, render.TraceOptions{})
		})
	}
	if want.SNAT == "node" && len(x.NodeAddrs) == 0 {
		return fmt.Errorf("snat: node: name the node the packet is traced on (node:)")
	}
	ch.Mismatches = CheckTrace(want, x, res)
	return nil
}

func (c *cellRun) checkObject(ctx context.Context, oc *scenarios.ObjectCheck, ch *Check) error {
	kind, name, _ := strings.Cut(oc.Get, "/")
	args := []string{"kubectl", "--name", c.lab, "get", kind, name, "-o", "json"}
	if oc.Namespace != "" {
		args = append(args, "-n", oc.Namespace)
	}
	out, err := c.run(ctx, ch, args...)
	if err != nil {
		return err
	}
	v, err := objectField(oc.Path, []byte(out))
	if err != nil {
		return err
	}
	c.show(ch, func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "%s: %s\n", oc.Path, v)
		return err
	})
	ch.Mismatches, err = compareField(oc, v)
	return err
}

// checkRefusal runs an expose step that must be refused.
func (c *cellRun) checkRefusal(ctx context.Context, e *scenarios.Expose, ch *Check) error {
	defer c.labs.forget()
	_, err := c.run(ctx, ch, exposeArgs(c.lab, e)...)
	switch {
	case err == nil:
		ch.Mismatches = []Mismatch{{What: "refusal", Expected: "refused: " + strconv.Quote(e.ExpectError), Actual: "the Service was created"}}
	case ctx.Err() != nil:
		return err
	case !strings.Contains(err.Error(), e.ExpectError):
		ch.Mismatches = []Mismatch{{What: "refusal", Expected: "refused: " + strconv.Quote(e.ExpectError), Actual: err.Error()}}
	default:
		ch.Output += err.Error() + "\n"
	}
	return nil
}
