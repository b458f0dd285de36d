package node

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestReadinessIgnoresAnAnswerFromBeforeAnExit: a /readyz answered by the control plane that then exited must
// not make the port ready for its successor, and the exit makes the agent ask again at once, not a slow poll
// later.
func TestReadinessIgnoresAnAnswerFromBeforeAnExit(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	r := &apiReadiness{changed: make(chan struct{})}
	asked := make(chan chan error)
	go r.poll(ctx, func(ctx context.Context) error {
		answer := make(chan error)
		select {
		case asked <- answer:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case err := <-answer:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	next := func(what string) chan error {
		t.Helper()
		select {
		case a := <-asked:
			return a
		case <-time.After(readyPoll):
			// Within readyPoll: a poll that waited the whole slow interval here is the bug this test is for.
			t.Fatalf("%s: no /readyz asked within %v", what, readyPoll)
			return nil
		}
	}
	isReady := func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.ready
	}
	next("first poll") <- nil
	// The next poll is asked once the answer is recorded; its answer is in flight when the control plane exits.
	inFlight := next("after the ready answer (it changed readiness)")
	if !isReady() {
		t.Fatal("ready after an ok /readyz: false")
	}
	r.lost(time.Second)
	inFlight <- nil
	afterExit := next("after the exit")
	if isReady() {
		t.Fatal("an answer asked for before the control plane's exit made its successor ready")
	}
	afterExit <- errors.New("connection refused")
	next("while not ready") <- nil
	next("after the successor's ready answer")
	if !isReady() {
		t.Fatal("the successor's ok /readyz did not make it ready")
	}
}
