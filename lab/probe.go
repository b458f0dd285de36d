package lab

import (
	"context"
	"net"
)

// Probe is the outcome of several connections from the lab's client to one address.
type Probe struct {
	Addr     string         `json:"addr"`
	Answers  map[string]int `json:"answers"`  // pod name → connections it answered
	Sources  map[string]int `json:"sources"`  // source IP the pods saw → count
	Failures int            `json:"failures"` // connections that got no answer
	LastErr  string         `json:"lastError,omitempty"`
}

// ProbeAddr makes n connections (one HTTP request each) from the lab's client to addr.
func ProbeAddr(ctx context.Context, p Provider, name, addr string, n int) Probe {
	pr := Probe{Addr: addr, Answers: map[string]int{}, Sources: map[string]int{}}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		r, err := p.Get(ctx, name, addr)
		if err != nil {
			pr.Failures++
			pr.LastErr = err.Error()
			continue
		}
		pr.Answers[r.Pod]++
		host, _, err := net.SplitHostPort(r.Client)
		if err != nil {
			host = r.Client
		}
		pr.Sources[host]++
	}
	return pr
}
