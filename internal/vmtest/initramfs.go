//go:build linux

package vmtest

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// image is the guest's root filesystem, built up in memory (host files are referenced, not read) and then
// written as one cpio archive. Paths are resolved through the image's own symlinks, so a file added as
// /lib/x86_64-linux-gnu/libc.so.6 lands in /usr/lib/... when /lib is a symlink to usr/lib, as on the host.
type image struct {
	entries []*imageEntry
	byPath  map[string]*imageEntry
	sonames map[string]bool // base names of the shared libraries in the image, to skip needless ldd runs
}

type imageEntry struct {
	path   string      // absolute and resolved: no component is a symlink
	mode   fs.FileMode // type bits and permissions
	src    string      // host file to copy, for regular files without data
	data   []byte      // contents of generated files
	size   int64
	target string // symlink target
	rdev   [2]uint32
}

// guestPath is the guest's PATH: GuestMain sets it, and binaries are linked into /usr/sbin to be found on it.
const guestPath = "/usr/sbin:/usr/bin:/sbin:/bin"

// newImage starts a root filesystem with Debian's merged-/usr layout and the directories GuestMain mounts on.
func newImage() *image {
	img := &image{byPath: map[string]*imageEntry{"/": {path: "/", mode: fs.ModeDir | 0o755}}, sonames: map[string]bool{}}
	for _, d := range []string{"/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib64", "/etc", "/root", "/proc", "/sys", "/run", "/dev"} {
		img.mkdirAll(d)
	}
	img.mkdirAll("/tmp").mode = fs.ModeDir | fs.ModeSticky | 0o777
	for _, l := range []string{"bin", "sbin", "lib", "lib64"} {
		img.symlink("/"+l, "usr/"+l)
	}
	// The kernel opens /dev/console as init's stdin, stdout and stderr before devtmpfs is mounted.
	img.add(&imageEntry{path: "/dev/console", mode: fs.ModeDevice | fs.ModeCharDevice | 0o600, rdev: [2]uint32{5, 1}})
	return img
}

// resolve follows the image's symlinks in every component of p, creating missing directories, and returns
// the resolved path. With final false the last component is not followed (it is the name being created).
func (img *image) resolve(p string, final bool) string { return img.walk(p, final, true) }

// lookup is the entry at p, following symlinks, or nil.
func (img *image) lookup(p string) *imageEntry { return img.byPath[img.walk(p, true, false)] }

func (img *image) walk(p string, final, create bool) string {
	parts := strings.Split(strings.Trim(path.Clean("/"+p), "/"), "/")
	cur := "/"
	for hops := 0; len(parts) > 0; {
		name := parts[0]
		parts = parts[1:]
		if name == "" {
			continue
		}
		next := path.Join(cur, name)
		e := img.byPath[next]
		if e != nil && e.mode&fs.ModeSymlink != 0 && (len(parts) > 0 || final) && hops < 40 {
			hops++
			target := e.target
			if !path.IsAbs(target) {
				target = path.Join(cur, target)
			}
			parts = append(strings.Split(strings.Trim(path.Clean(target), "/"), "/"), parts...)
			cur = "/"
			continue
		}
		if e == nil && len(parts) > 0 && create {
			img.add(&imageEntry{path: next, mode: fs.ModeDir | 0o755})
		}
		cur = next
	}
	return cur
}

func (img *image) mkdirAll(p string) *imageEntry {
	r := img.resolve(p, true)
	e := img.byPath[r]
	if e == nil {
		e = img.add(&imageEntry{path: r, mode: fs.ModeDir | 0o755})
	}
	return e
}

// add records e unless its path is taken; the first entry for a path wins.
func (img *image) add(e *imageEntry) *imageEntry {
	if old := img.byPath[e.path]; old != nil {
		return old
	}
	img.byPath[e.path] = e
	img.entries = append(img.entries, e)
	return e
}

func (img *image) symlink(p, target string) {
	img.add(&imageEntry{path: img.resolve(p, false), mode: fs.ModeSymlink | 0o777, target: target})
}

func (img *image) bytes(p string, data []byte, perm fs.FileMode) {
	img.add(&imageEntry{path: img.resolve(p, false), mode: perm, data: data, size: int64(len(data))})
}

// hostFile adds the host file src as guest path p.
func (img *image) hostFile(p, src string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	img.add(&imageEntry{path: img.resolve(p, false), mode: fi.Mode().Perm(), src: src, size: fi.Size()})
	return nil
}

// mirror adds host path p at the same path in the guest: a symlink as a symlink (and then its target), so that
// Debian's alternatives chains (iptables-restore -> /etc/alternatives/... -> xtables-nft-multi) keep the
// names programs dispatch on.
func (img *image) mirror(p string) error {
	for hops := 0; hops < 40; hops++ {
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			if err := img.hostFile(p, p); err != nil {
				return err
			}
			img.sonames[filepath.Base(p)] = true
			return nil
		}
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		img.symlink(p, target)
		img.sonames[filepath.Base(p)] = true
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(p), target)
		}
		p = target
	}
	return fmt.Errorf("%s: too many levels of symbolic links", p)
}

// elfWithLibs mirrors an ELF file (or a script and its interpreter) and the shared libraries it needs.
func (img *image) elfWithLibs(ctx context.Context, p string) error {
	if err := img.mirror(p); err != nil {
		return err
	}
	return img.libsOf(ctx, p)
}

// libsOf adds the shared libraries (and the dynamic loader) that the program or library p needs, as ldd
// resolves them on the host. ldd runs only when p needs a library the image does not have yet: iptables'
// ~120 extensions mostly need just libxtables and libc, and one ldd run per extension would cost a second.
func (img *image) libsOf(ctx context.Context, p string) error {
	if interp, ok := scriptInterpreter(p); ok {
		return img.elfWithLibs(ctx, interp)
	}
	needed, interp, err := elfNeeds(p)
	if err != nil {
		return err
	}
	if interp == "" && len(needed) == 0 {
		return nil // static
	}
	missing := interp != "" && img.lookup(interp) == nil
	for _, n := range needed {
		missing = missing || !img.sonames[n]
	}
	if !missing {
		return nil
	}
	out, err := command(ctx, "", "ldd", p)
	if err != nil {
		return err
	}
	libs, err := parseLdd(out)
	if err != nil {
		return fmt.Errorf("ldd %s: %w", p, err)
	}
	for _, l := range libs {
		if err := img.mirror(l); err != nil {
			return err
		}
	}
	return nil
}

// elfNeeds reads an ELF file's DT_NEEDED libraries and its program interpreter (empty for static files).
func elfNeeds(p string) (needed []string, interp string, err error) {
	f, err := elf.Open(p)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			b, err := io.ReadAll(prog.Open())
			if err != nil {
				return nil, "", fmt.Errorf("%s: PT_INTERP: %w", p, err)
			}
			interp = string(bytes.TrimRight(b, "\x00"))
		}
	}
	needed, err = f.ImportedLibraries()
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", p, err)
	}
	return needed, interp, nil
}

// scriptInterpreter is the program a "#!" script names.
func scriptInterpreter(p string) (string, bool) {
	f, err := os.Open(p)
	if err != nil {
		return "", false
	}
	defer f.Close()
	line, _ := bufio.NewReader(io.LimitReader(f, 256)).ReadString('\n')
	rest, ok := strings.CutPrefix(line, "#!")
	if fields := strings.Fields(rest); ok && len(fields) > 0 {
		return fields[0], true
	}
	return "", false
}

// parseLdd reads the libraries out of ldd's output for one file:
//
//	linux-vdso.so.1 (0x00007ffd...)                                       the vDSO: in the kernel, skipped
//	libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f...)            a library
//	/lib64/ld-linux-x86-64.so.2 (0x00007f...)                             the loader
//	libfoo.so.1 => not found                                              an error
func parseLdd(out string) ([]string, error) {
	var libs []string
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.Contains(line, "statically linked") {
			continue
		}
		if name, where, ok := strings.Cut(line, "=>"); ok {
			where = strings.TrimSpace(where)
			if strings.HasPrefix(where, "not found") {
				return nil, fmt.Errorf("%s not found", strings.TrimSpace(name))
			}
			if p, _, _ := strings.Cut(where, " ("); strings.HasPrefix(p, "/") {
				libs = append(libs, p)
			}
			continue
		}
		if p, _, _ := strings.Cut(line, " ("); strings.HasPrefix(p, "/") {
			libs = append(libs, p)
		}
	}
	return libs, nil
}

// binary adds a host program by name or path, with its libraries, at its host path, and links it into
// /usr/sbin under the name asked for so that the guest finds it on PATH.
func (img *image) binary(ctx context.Context, name string) error {
	p, err := exec.LookPath(name)
	if err != nil {
		return err
	}
	if p, err = filepath.Abs(p); err != nil {
		return err
	}
	if under, ok := mountedOver(p); ok {
		// A program built for the test (a temporary directory) would vanish under the guest's tmpfs: it goes
		// elsewhere, and the name on PATH leads to it.
		guest := path.Join(relocated, p)
		if err := img.hostFile(guest, p); err != nil {
			return fmt.Errorf("%s (under %s, which the guest mounts over): %w", name, under, err)
		}
		if err := img.libsOf(ctx, p); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		img.symlink(path.Join("/usr/sbin", filepath.Base(name)), guest)
		return nil
	}
	if err := img.elfWithLibs(ctx, p); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	img.symlink(path.Join("/usr/sbin", filepath.Base(name)), p)
	if real, err := filepath.EvalSymlinks(p); err == nil && isXtables(name, real) {
		return img.xtablesExtensions(ctx)
	}
	return nil
}

// relocated is where the guest keeps programs whose host path it mounts over.
const relocated = "/vmtest-host"

// mountedOver reports whether the guest mounts a filesystem over the directory holding host path p, and which.
func mountedOver(p string) (string, bool) {
	for _, m := range guestMounts {
		if p == m.target || strings.HasPrefix(p, m.target+"/") {
			return m.target, true
		}
	}
	return "", false
}

// isXtables reports whether a program is one of iptables' family, which dlopens its match and target
// extensions at run time (ldd cannot see those).
func isXtables(name, real string) bool {
	base := filepath.Base(name)
	for _, prefix := range []string{"iptables", "ip6tables", "ebtables", "arptables", "xtables"} {
		if strings.HasPrefix(base, prefix) || strings.HasPrefix(filepath.Base(real), prefix) {
			return true
		}
	}
	return false
}

// xtablesExtensions adds every iptables extension (libxt_*.so, libipt_*.so, ...) with the libraries they need.
func (img *image) xtablesExtensions(ctx context.Context) error {
	sos, _ := filepath.Glob("/usr/lib/*-linux-gnu*/xtables/*.so")
	more, _ := filepath.Glob("/usr/lib/xtables/*.so")
	sos = append(sos, more...)
	if len(sos) == 0 {
		return fmt.Errorf("no iptables extensions found in /usr/lib/*/xtables")
	}
	for _, so := range sos {
		if err := img.elfWithLibs(ctx, so); err != nil {
			return err
		}
	}
	return nil
}

// write writes the image as a newc cpio archive.
func (img *image) write(w io.Writer) error {
	cw := newCpioWriter(w)
	for _, e := range img.entries {
		if err := img.writeEntry(cw, e); err != nil {
			return err
		}
	}
	return cw.Close()
}

func (img *image) writeEntry(cw *cpioWriter, e *imageEntry) error {
	switch {
	case e.mode.IsDir():
		return cw.Dir(e.path, e.mode)
	case e.mode&fs.ModeSymlink != 0:
		return cw.Symlink(e.path, e.target)
	case e.mode&fs.ModeCharDevice != 0:
		return cw.CharDev(e.path, e.mode, e.rdev[0], e.rdev[1])
	case e.src == "":
		return cw.File(e.path, e.mode, e.size, bytes.NewReader(e.data))
	}
	f, err := os.Open(e.src)
	if err != nil {
		return err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || fi.Size() != e.size {
		return fmt.Errorf("%s changed while the initramfs was built", e.src)
	}
	return cw.File(e.path, e.mode, e.size, f)
}

// size is the total of the file contents in the image (the archive adds a little for headers).
func (img *image) size() int64 {
	var n int64
	for _, e := range img.entries {
		n += e.size
	}
	return n
}
