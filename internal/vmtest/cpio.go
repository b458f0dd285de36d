//go:build linux

package vmtest

import (
	"fmt"
	"io"
	"io/fs"
	"strings"
)

// cpioWriter writes the "newc" (SVR4, no checksum) cpio format, the one format the kernel's initramfs unpacker
// reads. It is written here rather than run as a tool so that the harness needs nothing but qemu and apt.
//
// Each entry is a 110-byte ASCII header, the NUL-terminated name padded to 4 bytes, then the data padded to
// 4 bytes; a "TRAILER!!!" entry ends the archive. The kernel does not create missing parent directories, so
// callers write a directory before anything in it.
type cpioWriter struct {
	w   io.Writer
	ino uint32
	err error
}

func newCpioWriter(w io.Writer) *cpioWriter { return &cpioWriter{w: w} }

// Unix file type bits of a cpio mode.
const (
	cpioDir     = 0o040000
	cpioFile    = 0o100000
	cpioSymlink = 0o120000
	cpioCharDev = 0o020000
)

// Dir writes a directory.
func (c *cpioWriter) Dir(name string, perm fs.FileMode) error {
	return c.entry(name, cpioDir|uint32(perm.Perm())|sticky(perm), 2, 0, 0, nil, 0)
}

// File writes a regular file of size bytes read from r; r must yield exactly size bytes.
func (c *cpioWriter) File(name string, perm fs.FileMode, size int64, r io.Reader) error {
	return c.entry(name, cpioFile|uint32(perm.Perm()), 1, 0, 0, r, size)
}

// Symlink writes a symbolic link; its data is the target.
func (c *cpioWriter) Symlink(name, target string) error {
	return c.entry(name, cpioSymlink|0o777, 1, 0, 0, strings.NewReader(target), int64(len(target)))
}

// CharDev writes a character device node.
func (c *cpioWriter) CharDev(name string, perm fs.FileMode, major, minor uint32) error {
	return c.entry(name, cpioCharDev|uint32(perm.Perm()), 1, major, minor, nil, 0)
}

// Close writes the trailer. It does not close the underlying writer.
func (c *cpioWriter) Close() error {
	return c.entry("TRAILER!!!", 0, 1, 0, 0, nil, 0)
}

func sticky(perm fs.FileMode) uint32 {
	if perm&fs.ModeSticky != 0 {
		return 0o1000
	}
	return 0
}

func (c *cpioWriter) entry(name string, mode, nlink, rmajor, rminor uint32, data io.Reader, size int64) error {
	if c.err != nil {
		return c.err
	}
	// Archive names are relative: "init", "usr/lib/...".
	name = strings.TrimPrefix(name, "/")
	if size > 0xffffffff {
		return fmt.Errorf("cpio: %s: %d bytes is more than newc can hold", name, size)
	}
	c.ino++
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.ino, mode, 0, 0, nlink, 0, size, 0, 0, rmajor, rminor, len(name)+1, 0)
	head := hdr + name + "\x00"
	c.write([]byte(head + strings.Repeat("\x00", pad4(len(head)))))
	if data != nil && c.err == nil {
		n, err := io.Copy(c.w, io.LimitReader(data, size))
		if err == nil && n != size {
			err = fmt.Errorf("cpio: %s: got %d bytes, header says %d", name, n, size)
		}
		if err != nil {
			c.err = err
		}
		c.write(make([]byte, pad4(int(size%4))))
	}
	return c.err
}

func (c *cpioWriter) write(b []byte) {
	if c.err == nil {
		_, c.err = c.w.Write(b)
	}
}

// pad4 is how many bytes bring n up to a multiple of 4.
func pad4(n int) int { return (4 - n%4) % 4 }
