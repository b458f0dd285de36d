package trace

import (
	"fmt"
	"net/netip"
	"strings"
)

// PredictedEndpoint is a path as a verification row shows it: its endpoint, pod and chance, else its verdict.
func PredictedEndpoint(p Path) string {
	if p.Endpoint == nil {
		return p.Verdict
	}
	return fmt.Sprintf("%s (%s) p=%.4f", p.Endpoint.Addr(), p.Endpoint.Pod, p.Probability)
}

// AnsweredBy says whether the pod that answered the connection is the path's endpoint.
func AnsweredBy(p Path, c Connection) bool {
	return p.Endpoint != nil && c.Answered && c.Pod != "" && strings.HasSuffix(p.Endpoint.Pod, "/"+c.Pod)
}

// OutcomeMismatch says how the connection's outcome contradicts the path, "" when it does not.
func OutcomeMismatch(p Path, c Connection) string {
	switch p.Verdict {
	case Delivered:
		if p.Reply != nil && p.Reply.Bypasses {
			if c.Answered {
				return fmt.Sprintf("the path says the reply bypasses the node and the connection fails, but %s answered", c.Pod)
			}
			return ""
		}
		if RefusedBeyond(p, c) {
			return ""
		}
		if p.Endpoint == nil && p.NextNode == "" {
			// It leaves the node untranslated: what owns the address beyond decides; no pod of the lab can.
			if c.Answered && c.Pod != "" {
				return fmt.Sprintf("the path leaves the node untranslated, but pod %s answered", c.Pod)
			}
			if p.NoAnswer != "" && c.Answered {
				return fmt.Sprintf("the path says nothing answers (%s), but the connection was answered", p.NoAnswer)
			}
			return ""
		}
		if !c.Answered {
			return fmt.Sprintf("the path delivers the packet but the connection failed: %s", c.Error)
		}
		if p.Endpoint != nil && p.Endpoint.Pod != "" && !AnsweredBy(p, c) {
			return fmt.Sprintf("the path leads to %s but %s answered", p.Endpoint.Pod, c.Pod)
		}
		if seen := clientIP(c.Client); p.SNAT != "" && p.SNAT != Unknown && seen != "" && p.SNAT != seen {
			return fmt.Sprintf("the path says the pod sees source %s; it saw %s", p.SNAT, seen)
		}
	case Rejected:
		// The node's ICMP error seen at the client's interfaces is the rejection, whether or not the client's
		// IP layer then took it (UnreachableOutcome).
		if c.Answered || !strings.Contains(c.Error, "refused") && c.Unreachable == "" {
			return fmt.Sprintf("the path rejects the packet; the connection: %s", describe(c))
		}
	case Dropped:
		if c.Answered || strings.Contains(c.Error, "refused") || c.Unreachable != "" {
			return fmt.Sprintf("the path drops the packet; the connection: %s", describe(c))
		}
	case Local:
		if c.Answered && c.Pod != "" {
			return fmt.Sprintf("the path keeps the packet on the node, but pod %s answered", c.Pod)
		}
	}
	return ""
}

// RefusedBeyond says whether the connection was refused after the node's rules delivered it as the path says:
// a reset from the endpoint (nothing listens on its port), which the rules cannot foresee.
func RefusedBeyond(p Path, c Connection) bool {
	return p.Verdict == Delivered && p.Endpoint != nil && !c.Answered && strings.Contains(c.Error, "connection refused")
}

// RefusedOutcome is what Verification.Outcome says when the rules agree and the endpoint refused.
func RefusedOutcome(p Path) string {
	return fmt.Sprintf("the rules agree; the endpoint refused the connection: nothing listens on %s (the Service's targetPort)?", p.Endpoint.Addr())
}

// UnrefusedRejection says whether the path's rejection reached the client's interfaces as an ICMP error but
// the connection was not refused: it timed out, the client's IP layer having not taken the error.
func UnrefusedRejection(p Path, c Connection) bool {
	return p.Verdict == Rejected && !c.Answered && c.Unreachable != "" && !strings.Contains(c.Error, "refused")
}

// UnreachableOutcome is what Verification.Outcome says when the rules agree and UnrefusedRejection holds.
func UnreachableOutcome(c Connection) string {
	return fmt.Sprintf("the node's %s reached the client, yet the connection timed out: the client's IP layer did not take it", c.Unreachable)
}

func describe(c Connection) string {
	if c.Answered {
		return "answered by " + c.Pod
	}
	if c.Unreachable != "" {
		return c.Error + " (" + c.Unreachable + " arrived)"
	}
	return c.Error
}

// clientIP drops the port from the address a pod reports.
func clientIP(s string) string {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().String()
	}
	return s
}
