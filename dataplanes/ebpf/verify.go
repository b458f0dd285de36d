package ebpf

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// noServiceReplyDiscarded is why a client on the same host as the node does not take Cilium's no-backend ICMP
// reply (measured on kind, and on the netns lab: datapath.Defines).
const noServiceReplyDiscarded = " (Cilium writes the reply over the SYN itself, which left a sender on this host" +
	" with its checksum still to do: the reply keeps that pending checksum's offset, now past its end, and the IP" +
	" layer discards it; a client across a real NIC is refused at once)"

// Records: every hop of the walk is a map lookup or a program, none of which the kernel's rule trace reports;
// Check compares the walk with the conntrack entry the datapath wrote instead.
func (Engine) Records(trace.Hop) bool { return true }

// Check compares an ebpf prediction with Cilium's datapath: the conntrack entry the datapath itself wrote for the
// real connection (cilium_ct4_global, the service entry keyed by the frontend and the client's address and port),
// which names the backend it chose, and the connection's outcome. Netfilter has TRACE for this; Cilium's own
// record of the choice is that entry.
func (Engine) Check(v *trace.Verification, part json.RawMessage, flow trace.Flow, _ bool) {
	pred, conn := v.Prediction, v.Connection
	chain := chainNetdev
	if len(pred.Paths) > 0 && len(pred.Paths[0].Hops) > 0 {
		chain = pred.Paths[0].Hops[0].Chain
	}
	if chain == chainSock {
		checkSock(v)
		return
	}
	var backend *netip.AddrPort
	if after, err := Decode(part); err == nil && len(part) > 0 {
		for _, row := range after.CT {
			k := row.Key
			// The service entry: daddr the frontend, saddr the client, dport the client's port, sport the
			// frontend's (lb4_local's CT_SERVICE lookup, see dataplanes/ebpf's walk).
			if k.Flags&TupleService == 0 || k.Daddr != flow.Dst || k.Saddr != flow.Src || k.Dport != flow.Sport || k.Sport != flow.Dport {
				continue
			}
			ev := trace.KernelEvent{Table: row.Map, Chain: chain, Kind: "entry", Text: row.String()}
			for _, b := range after.Backends {
				if uint64(b.ID) == row.Value.BackendID {
					a := netip.AddrPortFrom(b.Value.Address, b.Value.Port)
					backend = &a
					ev.Verdict = fmt.Sprintf("backend %d = %s", b.ID, a)
				}
			}
			if ev.Verdict == "" {
				ev.Verdict = fmt.Sprintf("backend %d (not in %s)", row.Value.BackendID, MapBackends)
			}
			v.Kernel = append(v.Kernel, ev)
		}
	}
	for i, path := range pred.Paths {
		if path.Endpoint != nil && backend != nil && path.Endpoint.Addr() == backend.String() {
			v.Path = i
		}
	}
	delivers := false // to a backend: an untranslated path writes no service entry either
	for _, p := range pred.Paths {
		delivers = delivers || p.Verdict == trace.Delivered && p.Endpoint != nil
	}
	switch {
	case len(v.Kernel) == 0 && !delivers && len(pred.Paths) > 0:
		// Predicted not to be load-balanced (dropped, or passed to the node's stack untranslated): the datapath must have
		// written no service entry, and the connection must end as the path says.
		v.Path = 0
		kernel := "(no conntrack service entry)"
		if conn.Unreachable != "" {
			kernel = conn.Unreachable // the datapath's own answer, seen where the client is
		}
		v.Rows = append(v.Rows, trace.Row{Predicted: trace.PredictedEndpoint(pred.Paths[0]), Kernel: kernel, Agree: true})
		if m := trace.OutcomeMismatch(pred.Paths[0], conn); m != "" {
			v.Reasons = append(v.Reasons, m)
		} else if trace.UnrefusedRejection(pred.Paths[0], conn) {
			v.Outcome = trace.UnreachableOutcome(conn) + noServiceReplyDiscarded
		}
	case len(v.Kernel) == 0:
		v.Reasons = append(v.Reasons, fmt.Sprintf("the datapath wrote no conntrack service entry for %s:%d -> %s", flow.Src, flow.Sport, pred.Packet.Dst))
		for _, p := range pred.Paths {
			v.Rows = append(v.Rows, trace.Row{Predicted: trace.PredictedEndpoint(p), Kernel: "(no entry)"})
		}
	case backend == nil:
		v.Reasons = append(v.Reasons, "the conntrack entry names a backend that is not in the backends map")
	case v.Path < 0:
		v.Reasons = append(v.Reasons, fmt.Sprintf("the datapath chose %s, which no predicted path reaches", backend))
		for _, p := range pred.Paths {
			v.Rows = append(v.Rows, trace.Row{Predicted: trace.PredictedEndpoint(p), Kernel: v.Kernel[0].Verdict})
		}
	default:
		v.Rows = append(v.Rows, trace.Row{Predicted: trace.PredictedEndpoint(pred.Paths[v.Path]), Kernel: v.Kernel[0].Verdict, Agree: true})
		if m := trace.OutcomeMismatch(pred.Paths[v.Path], conn); m != "" {
			v.Reasons = append(v.Reasons, m)
		}
	}
	v.Result = "agree"
	if len(v.Reasons) > 0 {
		v.Result = "disagree"
	}
}

// checkSock compares a socket-LB prediction with the real connection. The socket LB writes no conntrack entry;
// its one record of the choice, the socket's cilium_lb4_reverse_sk entry, goes when the socket is released, which
// the connection's end does before the node can be read again. So the kernel's answer is the connection itself:
// the pod that answered (it names itself) is the backend the socket was connected to, and the source it saw is
// the one the kernel gave the socket.
func checkSock(v *trace.Verification) {
	pred, conn := v.Prediction, v.Connection
	ev := trace.KernelEvent{Table: "cilium_lb4_reverse_sk", Chain: chainSock, Kind: "connection"}
	switch {
	case conn.Answered:
		ev.Text = fmt.Sprintf("answered by pod %s, which saw source %s", conn.Pod, conn.Client)
		ev.Verdict = "connected to " + conn.Pod
	default:
		ev.Text = "the connection failed: " + conn.Error
		ev.Verdict = "not connected"
	}
	v.Kernel = append(v.Kernel, ev)
	v.Path = -1
	for i, p := range pred.Paths {
		if trace.AnsweredBy(p, conn) {
			v.Path = i
		}
	}
	switch {
	case v.Path >= 0:
		p := pred.Paths[v.Path]
		v.Rows = append(v.Rows, trace.Row{Predicted: trace.PredictedEndpoint(p), Kernel: ev.Verdict, Agree: true})
		if m := trace.OutcomeMismatch(p, conn); m != "" {
			v.Reasons = append(v.Reasons, m)
		}
	case conn.Answered:
		v.Reasons = append(v.Reasons, fmt.Sprintf("pod %s answered, which no predicted path reaches", conn.Pod))
		for _, p := range pred.Paths {
			v.Rows = append(v.Rows, trace.Row{Predicted: trace.PredictedEndpoint(p), Kernel: ev.Verdict})
		}
	case len(pred.Paths) > 0 && pred.Paths[0].Verdict == trace.Rejected:
		// connect() itself fails: EHOSTUNREACH from the socket LB.
		v.Path = 0
		agree := strings.Contains(conn.Error, "no route to host")
		v.Rows = append(v.Rows, trace.Row{Predicted: trace.PredictedEndpoint(pred.Paths[0]), Kernel: ev.Text, Agree: agree})
		if !agree {
			v.Reasons = append(v.Reasons, "the path has connect() fail with EHOSTUNREACH; the connection: "+conn.Error)
		}
	case len(pred.Paths) > 0:
		v.Path = 0
		v.Rows = append(v.Rows, trace.Row{Predicted: trace.PredictedEndpoint(pred.Paths[0]), Kernel: ev.Text, Agree: true})
		if m := trace.OutcomeMismatch(pred.Paths[0], conn); m != "" {
			v.Reasons = append(v.Reasons, m)
		}
	}
	v.Result = "agree"
	if len(v.Reasons) > 0 {
		v.Result = "disagree"
	}
}

// ServiceChoice is one CT_SERVICE entry's record: the backend the datapath chose, and the entry's lifetime,
// which the datapath renews on each packet of the connection.
type ServiceChoice = dataplanes.Choice

// ServiceChoices are the datapath's own records of where it sent connections from client to frontend: the
// CT_SERVICE entries of node part (the keys lb4_local looks up: daddr the frontend, saddr the client, dport the
// client's port), by the client's source port. A backend id no longer in the backends map is the zero AddrPort.
func ServiceChoices(part json.RawMessage, client netip.Addr, frontend netip.AddrPort) (map[uint16]ServiceChoice, error) {
	st, err := Decode(part)
	if err != nil {
		return nil, err
	}
	backends := map[uint64]netip.AddrPort{}
	for _, b := range st.Backends {
		backends[uint64(b.ID)] = netip.AddrPortFrom(b.Value.Address, b.Value.Port)
	}
	out := map[uint16]ServiceChoice{}
	for _, row := range st.CT {
		k := row.Key
		if k.Flags&TupleService == 0 || k.Daddr != frontend.Addr() || k.Sport != frontend.Port() || k.Saddr != client {
			continue
		}
		out[k.Dport] = ServiceChoice{Backend: backends[row.Value.BackendID], Lifetime: row.Value.Lifetime}
	}
	return out, nil
}
