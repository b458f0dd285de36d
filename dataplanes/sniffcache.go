package dataplanes

import (
	"bytes"
	"encoding/json"
	"sync"
)

// SniffCache keeps what an engine's Sniff parsed for the part it made, for the Open of that very part that
// follows it: a pasted dump of thousands of Services is then parsed once, not again by Open. Open takes it (a
// walk changes what it parsed in place, so it serves one Open); any other part is parsed as usual.
type SniffCache[T any] struct {
	mu     sync.Mutex
	part   json.RawMessage
	parsed T
	held   bool
}

// Keep remembers parsed as what part was made from.
func (c *SniffCache[T]) Keep(part json.RawMessage, parsed T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.part, c.parsed, c.held = part, parsed, true
}

// Take returns what Sniff parsed for part, if part is the last one it made, and forgets it. The part comes back
// as the tracer got it (the same bytes: comparing them costs nothing next to parsing).
func (c *SniffCache[T]) Take(part json.RawMessage) (parsed T, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.held || !bytes.Equal(c.part, part) {
		return parsed, false
	}
	parsed, ok = c.parsed, true
	var zero T
	c.part, c.parsed, c.held = nil, zero, false
	return parsed, ok
}
