package trace

import "testing"

// Each path's endpoint carries the endpoint's overall chance, as Endpoints does: paths[].endpoint.probability
// was 0 in the JSON.
func TestFinishGivesEachPathsEndpointItsChance(t *testing.T) {
	a := &Endpoint{IP: "10.244.1.2", Port: 80}
	b := &Endpoint{IP: "10.244.1.3", Port: 80}
	tr := &Trace{Paths: []Path{
		{Probability: 0.25, Verdict: Delivered, Endpoint: a},
		{Probability: 0.5, Verdict: Delivered, Endpoint: b},
		{Probability: 0.25, Verdict: Delivered, Endpoint: &Endpoint{IP: "10.244.1.2", Port: 80}}, // a again
	}}
	tr.Finish()
	for _, p := range tr.Paths {
		want := 0.5
		if p.Endpoint.Probability != want {
			t.Errorf("path to %s: endpoint probability %v, want %v (its overall chance)", p.Endpoint.Addr(), p.Endpoint.Probability, want)
		}
	}
	if a.Probability != 0 {
		t.Errorf("Finish wrote through to the walker's endpoint (%v)", a.Probability)
	}
}

// A connection refused after the rules delivered it to the predicted endpoint is the endpoint's doing (nothing
// listens on the targetPort): no mismatch, and the verification's outcome says so. It used to be "disagree".
func TestRefusedByTheEndpointAgrees(t *testing.T) {
	p := Path{Probability: 1, Verdict: Delivered, Endpoint: &Endpoint{IP: "10.244.2.2", Port: 8080, Pod: "default/web-x"}}
	c := Connection{Error: "dial tcp 172.18.0.3:31786: connect: connection refused"}
	if m := OutcomeMismatch(p, c); m != "" {
		t.Errorf("mismatch %q, want none", m)
	}
	v := &Verification{Prediction: &Trace{Paths: []Path{p}}, Path: 0, Connection: c, Result: "agree"}
	v.Conclude()
	if v.Outcome != "the rules agree; the endpoint refused the connection: nothing listens on 10.244.2.2:8080 (the Service's targetPort)?" {
		t.Errorf("outcome %q", v.Outcome)
	}
	// A timeout is not a refusal: the path still disagrees with it.
	if m := OutcomeMismatch(p, Connection{Error: "i/o timeout"}); m == "" {
		t.Error("a timed-out connection on a delivering path is no mismatch")
	}
}

// A rejection whose ICMP error reached the client's interfaces agrees with a rejecting path even when the
// connection timed out (real Cilium's reply on kind, which the client's IP layer discards); a dropping path does
// not, and a rejecting path with neither a refusal nor an ICMP error seen still disagrees.
func TestRejectionSeenAtTheClient(t *testing.T) {
	reject := Path{Probability: 1, Verdict: Rejected}
	drop := Path{Probability: 1, Verdict: Dropped}
	timedOut := Connection{Error: "dial tcp4 :40000->172.18.0.4:32003: i/o timeout"}
	seen := timedOut
	seen.Unreachable = "ICMP port unreachable from 172.18.0.4 on veth1"
	if m := OutcomeMismatch(reject, seen); m != "" {
		t.Errorf("rejecting path, ICMP seen: mismatch %q", m)
	}
	if m := OutcomeMismatch(reject, timedOut); m == "" {
		t.Error("rejecting path, nothing seen and a timeout: no mismatch")
	}
	if m := OutcomeMismatch(drop, seen); m == "" {
		t.Error("dropping path, an ICMP error seen: no mismatch")
	}
	if m := OutcomeMismatch(drop, timedOut); m != "" {
		t.Errorf("dropping path, a timeout: mismatch %q", m)
	}
	v := &Verification{Prediction: &Trace{Paths: []Path{reject}}, Path: 0, Connection: seen, Result: "agree"}
	v.Conclude()
	if want := "the node's ICMP port unreachable from 172.18.0.4 on veth1 reached the client, yet the connection timed out: the client's IP layer did not take it"; v.Outcome != want {
		t.Errorf("outcome %q, want %q", v.Outcome, want)
	}
	refused := Connection{Error: "connect: connection refused", Unreachable: seen.Unreachable}
	v = &Verification{Prediction: &Trace{Paths: []Path{reject}}, Path: 0, Connection: refused, Result: "agree"}
	if v.Conclude(); v.Outcome != "" {
		t.Errorf("a refused connection's outcome %q, want none (the rejection did what it says)", v.Outcome)
	}
}
