package live

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/k8sguide/k8sguide/inspect/tracer"
	"github.com/k8sguide/k8sguide/lab/nodecmd"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/engines"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/kerneltrace"
	"github.com/k8sguide/k8sguide/inspect/snapshot"
	"github.com/k8sguide/k8sguide/lab"
)

// Verify makes a real connection for req's flow on a live lab, with kernel tracing on for that flow only,
// and compares the kernel's events with the prediction for the same flow (a fresh snapshot, a fixed
// source port). The tracing table is removed when it returns, whatever happened.
//
// The source port is picked at random; when the place the connection starts from still holds a socket on it
// (bind: address already in use), the whole check is made again with another port, up to three times. So it is
// when the kernel trace is incomplete (the monitor exited, or never reported its stop marker: CI runs under
// heavy load have lost a flow's events that way), since it then cannot be compared; and when the connection
// was answered but the monitor reported no event at all for it (the tracing table's own rule reports every
// packet of the flow, so that is the monitor's failure, not the dataplane's answer).
func Verify(ctx context.Context, p lab.Provider, name, node string, req tracer.Request) (*trace.Verification, error) {
	for attempt := 1; ; attempt++ {
		v, err := verifyOnce(ctx, p, name, node, req)
		if v != nil {
			v.Conclude()
		}
		if attempt == 3 {
			return v, err
		}
		if err != nil {
			if strings.Contains(err.Error(), kerneltrace.Incomplete) {
				continue
			}
			return v, err
		}
		if strings.Contains(v.Connection.Error, "network is unreachable") && len(tracer.RuleEvents(v.Kernel)) == 0 {
			// The place the connection starts from has no route to the address: the packet never reached the
			// node, so there is nothing of the node's to compare (the lab's client reaches the lab's network only).
			return nil, fmt.Errorf("cannot verify: %s has no route to %s, so a real packet never reaches the node (the trace walks it as if it did)", cmp.Or(req.From, "the client"), req.Dst)
		}
		bindFailed := strings.Contains(v.Connection.Error, "address already in use")
		_, monitored := monitorOf(v.Prediction)
		missedByMonitor := v.Connection.Answered && len(tracer.RuleEvents(v.Kernel)) == 0 && monitored
		if !bindFailed && !missedByMonitor && !(v.Result == "disagree" && rulesMoved(ctx, p, name, node, req, v.Prediction)) {
			return v, nil
		}
	}
}

// rulesMoved says whether the node's rules changed while a verification ran: a new prediction, for a fresh
// source port (the real connection has left conntrack state for its own), walks other rules or ends otherwise.
// The proxy syncing a change between the prediction and the packet (a Service created a moment before, whose
// endpoints it had not yet written) is then not reported as the tracer's error: the verification is made
// again. Asked only of a disagreement, so an agreeing verification costs nothing more.
//
// Only for an engine whose walk depends on its rules and the flow's addresses, not on state it keeps of its own
// choices: an engine that keeps a record of each choice (dataplanes.Checker: IPVS's connection entries, Cilium's
// conntrack) chooses from state that moves (the scheduler's counters, Maglev's hash of the source port), so a new
// prediction would always look moved.
func rulesMoved(ctx context.Context, p lab.Provider, name, node string, req tracer.Request, before *trace.Trace) bool {
	e, ok := engines.Get(dataplanes.Name(before.Dataplane))
	if _, records := e.(dataplanes.Checker); !ok || records {
		return false
	}
	snap, err := Snapshot(ctx, p, name, node)
	if err != nil {
		return false
	}
	req, _, err = verifySource(req, name, node)
	if err != nil {
		return false
	}
	now, err := tracer.Trace(snap, req)
	if err != nil || usesAffinity(before) || usesAffinity(now) {
		return false
	}
	return pathsShape(now) != pathsShape(before)
}

// usesAffinity says whether a prediction reads session affinity's state (an nftables affinity set, iptables'
// recent module): the real connection itself writes the entry a new prediction then reads, so a changed walk
// there says nothing of the rules.
func usesAffinity(t *trace.Trace) bool {
	for _, p := range t.Paths {
		for _, h := range p.Hops {
			if strings.Contains(h.Text, "@affinity-") || strings.Contains(h.Text, "-m recent") {
				return true
			}
		}
	}
	return false
}

// pathsShape is what of a prediction's paths depends on the rules alone: each path's verdict and endpoint, and
// the rules it visits.
func pathsShape(t *trace.Trace) string {
	var b strings.Builder
	for _, p := range t.Paths {
		fmt.Fprintf(&b, "%s %s:", p.Verdict, trace.PredictedEndpoint(p))
		for _, h := range p.Hops {
			fmt.Fprintf(&b, " %s/%s#%d %t %s;", h.Table, h.Chain, h.Rule, h.Matched, h.Verdict)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func verifyOnce(ctx context.Context, p lab.Provider, name, node string, req tracer.Request) (v *trace.Verification, err error) {
	defer func() {
		if err != nil && ctx.Err() != nil {
			err = fmt.Errorf("interrupted; the tracing rules were removed")
		}
	}()
	if proto := strings.ToLower(req.Proto); proto != "" && proto != "tcp" {
		return nil, fmt.Errorf("--verify sends a TCP connection; %s is not supported", proto)
	}
	snap, err := Snapshot(ctx, p, name, node)
	if err != nil {
		return nil, err
	}
	settled := map[dataplanes.Name]bool{}
	for _, e := range engines.All {
		if st, ok := e.(dataplanes.Settler); ok && snap.Part(e.Name()) != nil {
			if snap, settled[e.Name()], err = settle(ctx, p, name, node, snap, e.Name(), st); err != nil {
				return nil, err
			}
		}
	}
	var source string
	req, source, err = verifySource(req, name, node)
	if err != nil {
		return nil, err
	}
	var pred *trace.Trace
	pred, err = tracer.Trace(snap, req)
	if err != nil {
		return nil, err
	}
	flow, _ := pred.Packet.ParseFlow()
	if monitor, ok := monitorOf(pred); ok {
		v, err = traceRules(ctx, p, name, node, source, pred, monitor)
	} else {
		// No rule trace for this engine: its own record of the choice (Check, below) is what the prediction
		// is compared with.
		v = &trace.Verification{Version: trace.VerificationVersion, Prediction: pred, Connection: connect(ctx, p, name, source, pred.Packet.Dst, int(flow.Sport)), Path: -1}
	}
	if err != nil {
		return nil, err
	}
	if e, ok := engines.Get(dataplanes.Name(pred.Dataplane)); ok {
		if c, ok := e.(dataplanes.Checker); ok {
			after, err := Snapshot(ctx, p, name, node)
			if err != nil {
				return nil, err
			}
			c.Check(v, after.Part(e.Name()), flow, settled[e.Name()])
		}
	}
	return v, nil
}

// monitorOf is the kernel monitor that reports the rules of the prediction's dataplane, if it has one.
func monitorOf(pred *trace.Trace) (string, bool) {
	e, ok := engines.Get(dataplanes.Name(pred.Dataplane))
	if !ok {
		return "", false
	}
	m, ok := e.(dataplanes.Monitor)
	if !ok {
		return "", false
	}
	return m.Monitor(), true
}

// settle returns a snapshot whose engine counters are current, and whether it found one. An engine such as IPVS
// refreshes the counters a prediction is read from (round robin's turn) every Period, so a snapshot taken just
// after another connection (nodeport's reachability check, an earlier --verify) would put the turn one server
// off; two reads a period apart that agree show every connection made before the first. A lab that never goes
// quiet for that long gives up after a few tries: the turn is then not checked.
func settle(ctx context.Context, p lab.Provider, name, node string, snap *snapshot.Snapshot, engine dataplanes.Name, st dataplanes.Settler) (*snapshot.Snapshot, bool, error) {
	for range 4 {
		select {
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-time.After(st.Period() + 200*time.Millisecond):
		}
		next, err := Snapshot(ctx, p, name, node)
		if err != nil {
			return nil, false, err
		}
		if st.Same(snap.Part(engine), next.Part(engine)) {
			return next, true, nil
		}
		snap = next
	}
	return snap, false, nil
}

// traceRules makes the real connection with the kernel's rule trace on for its flow (monitor: kerneltrace's
// engine), and compares the events with the prediction.
func traceRules(ctx context.Context, p lab.Provider, name, node, source string, pred *trace.Trace, monitor string) (*trace.Verification, error) {
	flow, _ := pred.Packet.ParseFlow()
	kf := trace.Flow{Dst: flow.Dst, Dport: flow.Dport, Sport: flow.Sport, Proto: "tcp"}
	if pred.Packet.From != "node" {
		kf.Src = flow.Src
	}
	engine := monitor
	exe, err := p.ToolPath(ctx, name, node)
	if err != nil {
		return nil, err
	}
	// Whatever happens below, the tracing table goes. The kernel-trace command's table is owned by its nft, so
	// the kernel deletes it when that ends, even SIGKILLed; this delete is for a node whose kernel or nft has no
	// owner tables (there the next trace also removes a table a killed one left: kerneltrace.RemoveOrphans).
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		p.Exec(cctx, name, node, []string{"nft", "delete", "table", "ip", kerneltrace.TableName(kf)}, lab.Streams{Out: io.Discard, Err: io.Discard})
	}()

	run := execIn(p, name, node)
	kt, err := nodecmd.StartKernelTrace(ctx, run, exe, engine, kf)
	if err != nil {
		return nil, fmt.Errorf("kernel tracing on %s did not start: %v", node, err)
	}
	conn := connect(ctx, p, name, source, pred.Packet.Dst, int(kf.Sport))
	lines, err := kt.Events()
	if err != nil {
		return nil, fmt.Errorf("kernel tracing on %s: %v", node, err)
	}
	var events []trace.KernelEvent
	if engine == "iptables" {
		events = kerneltrace.ParseXtables(lines, kf)
	} else {
		events = kerneltrace.ParseNft(lines, kf)
	}
	return tracer.Compare(pred, events, conn), nil
}

// verifySource picks a fresh source port for the real connection and says where it starts: the lab's client,
// the node itself or a pod. The packet leaves with that place's own address, so --src cannot be given.
func verifySource(req tracer.Request, name, node string) (tracer.Request, string, error) {
	if req.Src != "" {
		return req, "", fmt.Errorf("--verify sends the packet from the --from place's own address: leave out --src")
	}
	req.Sport = uint16(firstOwnPort + rand.IntN(ownPorts))
	where, err := placeOf(name, req.From, node)
	return req, where, err
}

func connect(ctx context.Context, p lab.Provider, name, where, dst string, sport int) trace.Connection {
	exe, err := p.ToolPath(ctx, name, where)
	if err != nil {
		return trace.Connection{Error: err.Error()}
	}
	run := execIn(p, name, where)
	return nodecmd.Connect(ctx, run, exe, dst, sport)
}
