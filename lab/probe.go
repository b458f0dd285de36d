package lab

import (
	"context"
	"net"
	"sync"
)

// Probe is the outcome of several connections from the lab's client to one address: only of the connections
// that were made. An interrupted probe (its context cancelled) counts what was done before, and the connections
// the interruption cut short are neither answers nor failures.
type Probe struct {
	Addr        string         `json:"addr"`
	Made        int            `json:"made"`     // connections made to the end: answered or failed
	Answers     map[string]int `json:"answers"`  // pod name → connections it answered
	Sources     map[string]int `json:"sources"`  // source IP the pods saw → count
	Failures    int            `json:"failures"` // connections that got no answer
	LastErr     string         `json:"lastError,omitempty"`
	Interrupted bool           `json:"interrupted,omitempty"` // the context ended before all were made
}

// probesInFlight is how many of a probe's connections are open at once: a node that drops the traffic costs a
// few connect timeouts, not one per connection.
const probesInFlight = 5

// ProbeAddr makes n connections (one HTTP request each) from the lab's client to addr, a few at a time.
func ProbeAddr(ctx context.Context, p Provider, name, addr string, n int) Probe {
	pr := Probe{Addr: addr, Answers: map[string]int{}, Sources: map[string]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, probesInFlight)
	for i := 0; i < n && ctx.Err() == nil; i++ {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break // interrupted while waiting for a slot: start nothing more
		}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			r, err := p.Get(ctx, name, addr)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && ctx.Err() != nil {
				// Cut short by the interruption: not a connection the node failed. (An answer that came as the
				// interruption did still counts: it happened.)
				return
			}
			pr.Made++
			if err != nil {
				pr.Failures++
				pr.LastErr = err.Error()
				return
			}
			pr.Answers[r.Pod]++
			host, _, err := net.SplitHostPort(r.Client)
			if err != nil {
				host = r.Client
			}
			pr.Sources[host]++
		}()
	}
	wg.Wait()
	pr.Interrupted = pr.Made < n
	return pr
}
