// Package readcap reads what a user hands k8sguide (a manifest, a scenario) up to a limit for its kind, and
// refuses more in one line naming the input, its size and the limit. Without it a 200 MB manifest took 2.7 GB
// to parse (issue 36): what a user passes is bounded before any of it is parsed, and learning that it is too big
// never costs more than the limit.
package readcap

import (
	"fmt"
	"io"
	"os"
	"strconv"
)

// Limit is how much of one kind of input k8sguide reads.
type Limit struct {
	Max int64
	// What names the kind for the error ("a lab manifest"); Why says what Max is measured against.
	What, Why string
}

// Manifest is deploy's FILE or standard input, and a file a scenario step names. A manifest of 10,000 NodePort
// Services is about 2 MB; parsing costs time and memory in proportion (measured: 8 MB, 45,000 Services, 3.4 s
// and 180 MB; 200 MB took 2.7 GB). 8 MB holds four times the largest lab anyone deploys.
var Manifest = Limit{Max: 8 << 20, What: "a lab manifest", Why: "a manifest of 10,000 Services is about 2 MB"}

// Scenario is a scenario file: the largest shipped lesson is under 3 KB, so 1 MB is several hundred lessons in
// one file, and parses in a few MB.
var Scenario = Limit{Max: 1 << 20, What: "a scenario", Why: "the largest shipped lesson is 3 KB"}

// File reads path, refusing it when it holds more than l.Max bytes.
func (l Limit) File(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// A regular file says its size: refuse it before reading a byte. Anything else (a pipe, /dev/stdin,
	// /dev/zero) is read through the limit below.
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > l.Max {
		return nil, l.tooBig(path, st.Size())
	}
	return l.Reader(f, path)
}

// Reader reads in (named name in the error: "standard input"), refusing more than l.Max bytes.
func (l Limit) Reader(in io.Reader, name string) ([]byte, error) {
	// One byte more than the limit tells a stream that is too long without reading the rest of it.
	data, err := io.ReadAll(io.LimitReader(in, l.Max+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if int64(len(data)) > l.Max {
		return nil, l.tooBig(name, -1)
	}
	return data, nil
}

// tooBig is the one line that refuses name; size is -1 for a stream, whose size is not known beyond the limit.
func (l Limit) tooBig(name string, size int64) error {
	got, limit := "over "+Size(l.Max), Size(l.Max)
	if size >= 0 {
		got = Size(size)
		if got == limit {
			// Just over the limit: bytes tell them apart ("1.0 MB is too big … up to 1.0 MB" would not).
			got, limit = strconv.FormatInt(size, 10)+" bytes", strconv.FormatInt(l.Max, 10)+" bytes"
		}
	}
	msg := fmt.Sprintf("%s: %s is too big for %s (k8sguide reads up to %s", name, got, l.What, limit)
	if l.Why != "" {
		msg += "; " + l.Why
	}
	return fmt.Errorf("%s)", msg)
}

// Size is n bytes for a reader, never rounded up: "812 bytes", "64.0 KB", "1.5 MB", "200 MB".
func Size(n int64) string {
	unit, div := "MB", int64(1<<20)
	switch {
	case n < 1<<10:
		return strconv.FormatInt(n, 10) + " bytes"
	case n < 1<<20:
		unit, div = "KB", 1<<10
	}
	if n < 10*div {
		return fmt.Sprintf("%d.%d %s", n/div, n%div*10/div, unit)
	}
	return fmt.Sprintf("%d %s", n/div, unit)
}
