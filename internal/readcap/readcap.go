// Package readcap reads a file or a stream a user hands k8sguide (a manifest, a scenario) up to a limit, and
// refuses more in one line naming the input, its size and the limit. Without it a 200 MB manifest took 2.7 GB
// to parse, and a file of YAML aliases never stopped (issue 36): what a user passes is bounded before any of it
// is parsed, and knowing it is too big never costs more than the limit.
package readcap

import (
	"fmt"
	"io"
	"os"
	"strconv"
)

// File reads path, of at most max bytes; what names the kind of input for the error ("a manifest"), why says
// what the limit is measured against ("a 10,000-Service manifest is about 3 MB").
func File(path string, max int64, what, why string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// A regular file says its size: refuse it before reading a byte. Anything else (a pipe, /dev/stdin,
	// /dev/zero) is read through the limit below.
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > max {
		return nil, tooBig(path, st.Size(), max, what, why)
	}
	return Reader(f, path, max, what, why)
}

// Reader reads in (named name in the error: "standard input") up to max bytes.
func Reader(in io.Reader, name string, max int64, what, why string) ([]byte, error) {
	// One byte more than the limit tells a stream that is too long without reading the rest of it.
	data, err := io.ReadAll(io.LimitReader(in, max+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if int64(len(data)) > max {
		return nil, tooBig(name, -1, max, what, why)
	}
	return data, nil
}

// tooBig is the one line that refuses name; size is -1 for a stream, whose size is not known beyond the limit.
func tooBig(name string, size, max int64, what, why string) error {
	got, limit := "over "+Size(max), Size(max)
	if size >= 0 {
		got = Size(size)
		if got == limit {
			// Just over the limit: bytes tell them apart ("1.0 MB is more than … up to 1.0 MB" would not).
			got, limit = strconv.FormatInt(size, 10)+" bytes", strconv.FormatInt(max, 10)+" bytes"
		}
	}
	msg := fmt.Sprintf("%s: %s is too big for %s (k8sguide reads up to %s", name, got, what, limit)
	if why != "" {
		msg += "; " + why
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
