package readcap

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// countingReader counts what is read from it, to show a stream too long is not read past the limit.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// endless is a stream that never ends (a pipe from `yes`, /dev/zero).
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'y'
	}
	return len(p), nil
}

func TestFileRefusesWithoutReading(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(10 << 30); err != nil { // a sparse 10 GB file: reading it would take minutes
		t.Fatal(err)
	}
	f.Close()
	_, err = Limit{16 << 20, "a manifest", "a 10,000-Service manifest is about 3 MB"}.File(big)
	want := big + ": 10240 MB is too big for a manifest (k8sguide reads up to 16 MB; a 10,000-Service manifest is about 3 MB)"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	small := filepath.Join(dir, "small.yaml")
	os.WriteFile(small, []byte("kind: Service\n"), 0o644)
	if data, err := (Limit{16 << 20, "a manifest", ""}).File(small); err != nil || string(data) != "kind: Service\n" {
		t.Fatalf("a small file: %q, %v", data, err)
	}
	// Exactly the limit is read; one byte more is not, and the sizes then read in bytes.
	exact := filepath.Join(dir, "exact")
	os.WriteFile(exact, bytes.Repeat([]byte("x"), 1<<20), 0o644)
	if _, err := (Limit{1 << 20, "x", ""}).File(exact); err != nil {
		t.Fatalf("a file of exactly the limit: %v", err)
	}
	os.WriteFile(exact, bytes.Repeat([]byte("x"), 1<<20+1), 0o644)
	if _, err := (Limit{1 << 20, "a scenario", ""}).File(exact); err == nil || !strings.Contains(err.Error(), "1048577 bytes is too big for a scenario (k8sguide reads up to 1048576 bytes)") {
		t.Fatalf("one byte over: %v", err)
	}
}

func TestReaderStopsAtLimit(t *testing.T) {
	in := &countingReader{r: endless{}}
	_, err := Limit{1 << 20, "a manifest", ""}.Reader(in, "standard input")
	if err == nil || err.Error() != "standard input: over 1.0 MB is too big for a manifest (k8sguide reads up to 1.0 MB)" {
		t.Fatalf("got %v", err)
	}
	if in.n > 1<<20+64<<10 {
		t.Errorf("read %d bytes of an endless stream to refuse it at 1 MB", in.n)
	}
	if data, err := (Limit{3, "x", ""}).Reader(strings.NewReader("abc"), "x"); err != nil || string(data) != "abc" {
		t.Fatalf("%q %v", data, err)
	}
}

func TestSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0 bytes", 1023: "1023 bytes", 1024: "1.0 KB", 1<<20 - 1: "1023 KB", 3 << 19: "1.5 MB", 2<<20 - 1: "1.9 MB", 200 << 20: "200 MB"} {
		if got := Size(n); got != want {
			t.Errorf("Size(%d) = %q, want %q", n, got, want)
		}
	}
}
