package lab

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

// answerUntil answers limit requests, then cancels the probe (the user's Ctrl-C) and holds every later request
// until its context ends, as a connection cut short does.
type answerUntil struct {
	Provider
	limit  int32
	n      atomic.Int32
	cancel context.CancelFunc
}

func (a *answerUntil) Get(ctx context.Context, name, addr string) (Reply, error) {
	if a.n.Add(1) > a.limit {
		a.cancel()
		<-ctx.Done()
		return Reply{}, ctx.Err()
	}
	return Reply{Pod: "web-1", Client: "172.18.0.1:40000"}, nil
}

// Ctrl-C during `nodeport --check 200000` reported 200000/200000 answered: a probe counts only what it made.
func TestProbeAddrInterruptedCountsOnlyWhatHappened(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := &answerUntil{limit: 20, cancel: cancel}
	pr := ProbeAddr(ctx, p, "k", "172.18.0.2:30080", 200000)
	if !pr.Interrupted {
		t.Errorf("not marked interrupted: %+v", pr)
	}
	if pr.Made != 20 || pr.Answers["web-1"] != 20 || pr.Failures != 0 {
		t.Errorf("made %d, answers %v, failures %d (%s); want the 20 answered connections and no failure", pr.Made, pr.Answers, pr.Failures, pr.LastErr)
	}
	if started := p.n.Load(); started > 20+probesInFlight {
		t.Errorf("%d connections started after the interruption", started-20)
	}
}

type failing struct{ Provider }

func (failing) Get(ctx context.Context, name, addr string) (Reply, error) {
	return Reply{}, errors.New("connection refused")
}

func TestProbeAddrCountsFailures(t *testing.T) {
	pr := ProbeAddr(context.Background(), failing{}, "k", "172.18.0.2:30080", 7)
	if pr.Interrupted || pr.Made != 7 || pr.Failures != 7 || pr.LastErr != "connection refused" {
		t.Errorf("%+v: want 7 made, 7 failed, not interrupted", pr)
	}
}
