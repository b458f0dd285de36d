package tracer

import (
	"fmt"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/engines"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/kerneltrace"
)

// kernelKey is what a predicted hop and a kernel event must share to be the same step: table, chain and the
// rule's text (the monitors print rules the way iptables-save / nft list do), or the chain's policy.
func hopKey(h trace.Hop) string {
	text := h.Text
	if h.Rule == 0 {
		text = "policy " + strings.ToLower(strings.TrimPrefix(h.Text, "policy "))
	} else if strings.Contains(h.Table, " ") {
		text = kerneltrace.NormalizeNft(text)
	}
	return h.Table + "|" + h.Chain + "|" + text
}

func eventKey(e trace.KernelEvent) string {
	text := e.Text
	if e.Kind == "policy" {
		text = "policy " + strings.ToLower(e.Verdict)
	}
	return e.Table + "|" + e.Chain + "|" + text
}

// sameStep says whether a predicted hop is the kernel's event: the same table, chain and rule text (kernelKey),
// or, for a rule of iptables-nft's tables met on an nftables node (the walk reads them as iptables-save prints
// them; nft's trace prints them as nft translates them, "ip filter" for filter), the same table, chain, kind and
// verdict. Rule text in the two syntaxes cannot be compared without translating one into the other; the events'
// order still is, rule by rule.
func sameStep(h trace.Hop, e trace.KernelEvent) bool {
	if hopKey(h) == eventKey(e) {
		return true
	}
	if strings.Contains(h.Table, " ") || e.Table != "ip "+h.Table || e.Chain != h.Chain {
		return false
	}
	if h.Rule == 0 {
		return e.Kind == "policy" && strings.EqualFold(strings.TrimPrefix(h.Verdict, "policy "), e.Verdict)
	}
	return e.Kind == "rule" && xtVerdict(h.Verdict) == strings.ToLower(e.Verdict)
}

// xtVerdict is the verdict nft's trace prints for a rule whose walk verdict is v: a NAT target accepts (the
// packet leaves the nat chain), REJECT drops (after sending its answer), a rule that only changes the packet
// (MARK, a match with no target) continues.
func xtVerdict(v string) string {
	v = strings.ToLower(v)
	switch first, _, _ := strings.Cut(v, " "); first {
	case "jump", "goto", "accept", "drop", "return", "queue":
		return v
	case "masquerade", "dnat", "snat", "redirect", "netmap":
		return "accept"
	case "reject":
		return "drop"
	}
	return "continue"
}

// withoutReturns drops the kernel's "return" events and says whether there were any. Older kernels (6.1, the
// IPVS test VM's) report every exit from a chain that did not end in a verdict, by falling off its end or by a
// RETURN rule, as such an event, without the rule; newer ones (6.18 here) report a RETURN rule as a rule and a
// fall-off not at all. Where returns are events, a RETURN rule cannot be told from a fall-off, so neither is
// compared; the next event, in the chain the packet returned to, still is.
func withoutReturns(events []trace.KernelEvent) ([]trace.KernelEvent, bool) {
	var out []trace.KernelEvent
	returns := false
	for _, e := range events {
		if e.Kind == "return" {
			returns = true
			continue
		}
		out = append(out, e)
	}
	return out, returns
}

// kernelVisible are the hops the kernel's rule trace reports: rules that matched (they end with a verdict,
// "continue" included) and policies. Rules that did not match leave no event, nor do the hops an engine records
// itself (IPVS is not a rule table: its choice is compared with its connection entry instead). With
// returnsAsEvents (see withoutReturns) RETURN rules are left out too.
func kernelVisible(p trace.Path, returnsAsEvents bool, recorded func(trace.Hop) bool) []trace.Hop {
	var out []trace.Hop
	for _, h := range p.Hops {
		if h.Matched && !recorded(h) && !(returnsAsEvents && h.Verdict == "return") {
			out = append(out, h)
		}
	}
	return out
}

// RuleEvents are the kernel's rule trace events, without the entries an engine's own record adds (see
// dataplanes.Checker).
func RuleEvents(events []trace.KernelEvent) []trace.KernelEvent {
	var out []trace.KernelEvent
	for _, e := range events {
		if e.Kind != "entry" {
			out = append(out, e)
		}
	}
	return out
}

// Compare matches the kernel's events with the predicted paths and the connection's outcome.
func Compare(pred *trace.Trace, events []trace.KernelEvent, conn trace.Connection) *trace.Verification {
	v := &trace.Verification{Version: trace.VerificationVersion, Prediction: pred, Kernel: events, Connection: conn, Path: -1}
	events, returns := withoutReturns(events)
	recorded := func(trace.Hop) bool { return false }
	if e, ok := engines.Get(dataplanes.Name(pred.Dataplane)); ok {
		if c, ok := e.(dataplanes.Checker); ok {
			recorded = c.Records
		}
	}
	// Several paths can hit the same rules (nftables picks the endpoint inside one numgen rule): among the
	// paths that fit the kernel's events, take the one to the pod that answered.
	best, bestRank := -1, -1
	for i, p := range pred.Paths {
		hops := kernelVisible(p, returns, recorded)
		score := 0
		for score < len(hops) && score < len(events) && sameStep(hops[score], events[score]) {
			score++
		}
		rank := score * 4
		if score == len(hops) && score == len(events) {
			rank += 1 << 20
		}
		if trace.AnsweredBy(p, conn) {
			rank += 2
		}
		if rank > bestRank {
			best, bestRank = i, rank
		}
	}
	v.Path = best
	if best < 0 {
		v.Result = "disagree"
		v.Reasons = append(v.Reasons, "the prediction has no path")
		return v
	}
	p := pred.Paths[best]
	hops := kernelVisible(p, returns, recorded)
	n := max(len(hops), len(events))
	agree := len(hops) == len(events)
	for i := 0; i < n; i++ {
		var r trace.Row
		if i < len(hops) {
			h := hops[i]
			r.Predicted = fmt.Sprintf("%s/%s #%d %s", h.Table, h.Chain, h.Rule, h.Verdict)
			if h.Rule == 0 {
				r.Predicted = fmt.Sprintf("%s/%s %s", h.Table, h.Chain, h.Verdict)
			}
		}
		if i < len(events) {
			e := events[i]
			r.Kernel = fmt.Sprintf("%s/%s %s", e.Table, e.Chain, e.Verdict)
			if e.Kind == "policy" {
				r.Kernel = fmt.Sprintf("%s/%s policy %s", e.Table, e.Chain, strings.ToLower(e.Verdict))
			}
		}
		r.Agree = i < len(hops) && i < len(events) && sameStep(hops[i], events[i])
		if !r.Agree {
			agree = false
		}
		v.Rows = append(v.Rows, r)
	}
	if !agree {
		v.Reasons = append(v.Reasons, "the kernel's rules differ from every predicted path")
	}
	if reason := trace.OutcomeMismatch(p, conn); reason != "" {
		agree = false
		v.Reasons = append(v.Reasons, reason)
	}
	v.Result = "disagree"
	if agree {
		v.Result = "agree"
	}
	return v
}
