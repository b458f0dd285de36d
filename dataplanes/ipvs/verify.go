package ipvs

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// Records says which hops IPVS records itself: its scheduling, which the kernel's rule trace does not report
// (IPVS is not a rule table); Check compares it with the connection entry instead.
func (Engine) Records(h trace.Hop) bool { return h.Table == Table }

// IPVS schedules in its own netfilter hooks, which the kernel's rule trace does not report. The rules around it
// are compared with the trace events as on an iptables node; its choice is compared with the connection entry
// IPVS made for the flow (/proc/net/ip_vs_conn: client, virtual address, real server), its own record of the
// choice, as Cilium's conntrack entry is for ebpf.

// Check adds IPVS's record of the flow to a verification of the rules: the entry must name the real server of the
// path the connection took, and, when the prediction gave round robin's turn from settled counters, the server it
// said was next.
func (Engine) Check(v *trace.Verification, part json.RawMessage, flow trace.Flow, turnsCurrent bool) {
	defer func() {
		if len(v.Reasons) > 0 {
			v.Result = "disagree"
		}
	}()
	pred := v.Prediction
	virtual := netip.AddrPortFrom(flow.Dst, flow.Dport)
	var entry *Connection
	if after, err := Decode(part); err == nil && len(part) > 0 {
		for i := range after.Connections {
			c := &after.Connections[i]
			// The client's port is the one the connection was made from; its address is the one the node
			// chose for it, which the prediction also says.
			if strings.EqualFold(c.Protocol, flow.Proto) && c.Virtual == virtual && c.Client.Port() == flow.Sport {
				entry = c
			}
		}
	}
	scheduled := -1 // the path IPVS's entry points to
	for i, p := range pred.Paths {
		if entry != nil && p.Endpoint != nil && p.Endpoint.Addr() == entry.Dest.String() {
			scheduled = i
		}
	}
	viaIPVS := false
	for _, p := range pred.Paths {
		for _, h := range p.Hops {
			viaIPVS = viaIPVS || h.Table == Table && h.Matched && h.Verdict != ""
		}
	}
	predicted := func(p trace.Path) string {
		if p.Endpoint == nil {
			return p.Verdict
		}
		s := "ipvs -> " + trace.PredictedEndpoint(p)
		if p.Endpoint.Turn > 0 {
			s += fmt.Sprintf(" turn %d", p.Endpoint.Turn)
		}
		return s
	}
	switch {
	case entry == nil && !viaIPVS:
		// No virtual server for the packet, or one with no real server to choose (IPVS rejects the packet).
		v.Rows = append(v.Rows, trace.Row{Predicted: "IPVS chooses no real server", Kernel: "(no IPVS connection entry)", Agree: true})
		return
	case entry == nil:
		v.Reasons = append(v.Reasons, fmt.Sprintf("IPVS made no connection entry for %s:%d -> %s", flow.Src, flow.Sport, virtual))
		v.Rows = append(v.Rows, trace.Row{Predicted: "an IPVS real server", Kernel: "(no IPVS connection entry)"})
		return
	}
	ev := trace.KernelEvent{Table: Table, Chain: "ip_vs_conn", Kind: "entry",
		Text:    fmt.Sprintf("%s %s -> %s -> %s %s", entry.Protocol, entry.Client, entry.Virtual, entry.Dest, entry.State),
		Verdict: "real server " + entry.Dest.String()}
	v.Kernel = append(v.Kernel, ev)
	// The paths through IPVS share their rules, so the rules alone did not pick v.Path: the answering pod did,
	// or nothing when the connection was not answered. The entry says which it was.
	switch {
	case scheduled < 0:
		v.Reasons = append(v.Reasons, fmt.Sprintf("IPVS chose %s, which no predicted path reaches", entry.Dest))
	case v.Connection.Answered && scheduled != v.Path:
		v.Reasons = append(v.Reasons, fmt.Sprintf("IPVS's entry names %s but %s answered", entry.Dest, v.Connection.Pod))
	default:
		v.Path = scheduled
	}
	row := trace.Row{Kernel: ev.Text, Agree: scheduled >= 0 && scheduled == v.Path}
	if v.Path >= 0 {
		row.Predicted = predicted(pred.Paths[v.Path])
	}
	v.Rows = append(v.Rows, row)
	if !turnsCurrent {
		return
	}
	for _, p := range pred.Paths {
		if p.Endpoint != nil && p.Endpoint.Turn == 1 {
			next := trace.Row{Predicted: "round robin's next: " + p.Endpoint.Addr(), Kernel: "chosen: " + entry.Dest.String(),
				Agree: p.Endpoint.Addr() == entry.Dest.String()}
			v.Rows = append(v.Rows, next)
			if !next.Agree {
				v.Reasons = append(v.Reasons, fmt.Sprintf("the trace said round robin's next real server is %s; IPVS chose %s", p.Endpoint.Addr(), entry.Dest))
			}
		}
	}
}
