package trace

// VerificationVersion names the JSON schema of Verification.
const VerificationVersion = "k8sguide.verify/v1"

// KernelEvent is one rule or policy the kernel reported for a traced packet.
type KernelEvent struct {
	Table   string `json:"table"` // "nat", "filter" (iptables) or "ip kube-proxy" (nftables)
	Chain   string `json:"chain"`
	Kind    string `json:"kind"`    // rule | policy
	Text    string `json:"text"`    // the rule as the monitor printed it (iptables-save syntax for iptables)
	Verdict string `json:"verdict"` // as the monitor printed it: JUMP:KUBE-SVC-…, ACCEPT, jump services, accept, …
}

// Verification compares a prediction with what the kernel did to a real packet of the same flow.
type Verification struct {
	Version    string        `json:"version"`
	Prediction *Trace        `json:"prediction"`
	Kernel     []KernelEvent `json:"kernel"`
	// Path is the index of the predicted path the kernel's events are compared with (the one whose rules
	// match them, else the closest); -1 when the prediction has no path.
	Path int   `json:"path"`
	Rows []Row `json:"rows"`
	// Connection is what the real connection did: the pod that answered and the source it saw, or the error.
	Connection Connection `json:"connection"`
	// Result is "agree" when the kernel hit exactly the rules of a predicted path and the connection ended as
	// that path says; "disagree" otherwise, with Reasons.
	Result  string   `json:"result"`
	Reasons []string `json:"reasons,omitempty"`
	// Outcome says, when the result is "agree", what became of the connection beyond the rules, when that is
	// not an answer: the endpoint refused it (RefusedOutcome), or the node's ICMP error reached the client but
	// the connection timed out (UnreachableOutcome).
	Outcome string `json:"outcome,omitempty"`
}

// Row pairs one predicted rule with one kernel event.
type Row struct {
	Predicted string `json:"predicted"`
	Kernel    string `json:"kernel"`
	Agree     bool   `json:"agree"`
}

// Connection is the outcome of the real connection.
type Connection struct {
	Answered bool   `json:"answered"`
	Pod      string `json:"pod,omitempty"`
	Client   string `json:"client,omitempty"` // the source address the pod saw
	Error    string `json:"error,omitempty"`
	// Unreachable is the ICMP destination unreachable for the failed connection that reached the client's
	// interfaces ("ICMP port unreachable from 172.18.0.4 on br-1"), seen before its IP layer, which may not
	// have taken it: the connection then timed out rather than being refused.
	Unreachable string `json:"unreachable,omitempty"`
}

// Conclude fills in Outcome once Result is known.
func (v *Verification) Conclude() {
	if v.Result != "agree" || v.Prediction == nil || v.Path < 0 || v.Path >= len(v.Prediction.Paths) {
		return
	}
	switch p := v.Prediction.Paths[v.Path]; {
	case v.Outcome != "":
		// The engine's Check said it already, with the engine's reason.
	case RefusedBeyond(p, v.Connection):
		v.Outcome = RefusedOutcome(p)
	case UnrefusedRejection(p, v.Connection):
		v.Outcome = UnreachableOutcome(v.Connection)
	}
}
