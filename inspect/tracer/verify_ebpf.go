package tracer

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf"
	"github.com/k8sguide/k8sguide/inspect/snapshot"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/lab"
)

// verifyEBPF checks an ebpf prediction against Cilium's datapath: a real connection of the flow, then the
// conntrack entry the datapath itself wrote for it (cilium_ct4_global, the service entry keyed by the
// frontend and the client's address and port), which names the backend it chose. Netfilter has TRACE for
// this; Cilium's own record of the choice is that entry.
func verifyEBPF(ctx context.Context, p lab.Provider, name, node, source string, pred *trace.Trace) (*trace.Verification, error) {
	flow, err := pred.Packet.ParseFlow()
	if err != nil {
		return nil, err
	}
	conn := connect(ctx, p, name, source, pred.Packet.Dst, int(flow.Sport))
	after, err := Snapshot(ctx, p, name, node)
	if err != nil {
		return nil, err
	}
	return compareEBPF(pred, after, flow, conn), nil
}

// compareEBPF matches the prediction with the datapath's conntrack entry for the flow and with the connection.
func compareEBPF(pred *trace.Trace, after *snapshot.Snapshot, flow trace.Flow, conn trace.Connection) *trace.Verification {
	v := &trace.Verification{Version: trace.VerificationVersion, Prediction: pred, Connection: conn, Path: -1}
	var backend *netip.AddrPort
	if after.EBPF != nil {
		for _, row := range after.EBPF.CT {
			k := row.Key
			// The service entry: daddr the frontend, saddr the client, dport the client's port, sport the
			// frontend's (lb4_local's CT_SERVICE lookup, see dataplanes/ebpf's walk).
			if k.Flags&ebpf.TupleService == 0 || k.Daddr != flow.Dst || k.Saddr != flow.Src || k.Dport != flow.Sport || k.Sport != flow.Dport {
				continue
			}
			ev := trace.KernelEvent{Table: row.Map, Chain: "cil_from_netdev", Kind: "entry", Text: row.String()}
			for _, b := range after.EBPF.Backends {
				if uint64(b.ID) == row.Value.BackendID {
					a := netip.AddrPortFrom(b.Value.Address, b.Value.Port)
					backend = &a
					ev.Verdict = fmt.Sprintf("backend %d = %s", b.ID, a)
				}
			}
			if ev.Verdict == "" {
				ev.Verdict = fmt.Sprintf("backend %d (not in %s)", row.Value.BackendID, ebpf.MapBackends)
			}
			v.Kernel = append(v.Kernel, ev)
		}
	}
	for i, path := range pred.Paths {
		if path.Endpoint != nil && backend != nil && path.Endpoint.Addr() == backend.String() {
			v.Path = i
		}
	}
	delivers := false
	for _, p := range pred.Paths {
		delivers = delivers || p.Verdict == trace.Delivered
	}
	switch {
	case len(v.Kernel) == 0 && !delivers && len(pred.Paths) > 0:
		// Predicted not to be load-balanced (dropped, or passed to the node's stack): the datapath must have
		// written no service entry, and the connection must end as the path says.
		v.Path = 0
		v.Rows = append(v.Rows, trace.Row{Predicted: predictedEndpoint(pred.Paths[0]), Kernel: "(no conntrack service entry)", Agree: true})
		if m := outcomeMismatch(pred.Paths[0], conn); m != "" {
			v.Reasons = append(v.Reasons, m)
		}
	case len(v.Kernel) == 0:
		v.Reasons = append(v.Reasons, fmt.Sprintf("the datapath wrote no conntrack service entry for %s:%d -> %s", flow.Src, flow.Sport, pred.Packet.Dst))
		for _, p := range pred.Paths {
			v.Rows = append(v.Rows, trace.Row{Predicted: predictedEndpoint(p), Kernel: "(no entry)"})
		}
	case backend == nil:
		v.Reasons = append(v.Reasons, "the conntrack entry names a backend that is not in the backends map")
	case v.Path < 0:
		v.Reasons = append(v.Reasons, fmt.Sprintf("the datapath chose %s, which no predicted path reaches", backend))
		for _, p := range pred.Paths {
			v.Rows = append(v.Rows, trace.Row{Predicted: predictedEndpoint(p), Kernel: v.Kernel[0].Verdict})
		}
	default:
		v.Rows = append(v.Rows, trace.Row{Predicted: predictedEndpoint(pred.Paths[v.Path]), Kernel: v.Kernel[0].Verdict, Agree: true})
		if m := outcomeMismatch(pred.Paths[v.Path], conn); m != "" {
			v.Reasons = append(v.Reasons, m)
		}
	}
	v.Result = "agree"
	if len(v.Reasons) > 0 {
		v.Result = "disagree"
	}
	return v
}

// predictedEndpoint is a path as a verification row shows it: its endpoint, pod and chance, else its verdict.
func predictedEndpoint(p trace.Path) string {
	if p.Endpoint == nil {
		return p.Verdict
	}
	return fmt.Sprintf("%s (%s) p=%.4f", p.Endpoint.Addr(), p.Endpoint.Pod, p.Probability)
}
