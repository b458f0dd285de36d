// Package privdir keeps the directories k8sguide caches executable artefacts in (compiled Cilium objects that
// root loads into the kernel, Graphviz's compiled WebAssembly, the node image's binaries, test kernels) out of
// other users' reach. A cache another user could write into, or could have made first in a shared place such as
// /tmp, lets that user choose what root runs: every directory on the way must be owned by root or the running
// user and writable by nobody else (a sticky directory such as /tmp may be passed through, since no one else
// can rename or remove what is ours in it), and the cache itself must be the running user's.
package privdir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// maxLinks bounds the symbolic links followed while checking one path (the kernel's own limit is 40).
const maxLinks = 40

// Ensure makes dir (and its missing parents) mode 0700 and checks that it is private to the running user: see
// the package comment. Its error is one line naming the offending path.
func Ensure(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	links := 0
	if err := walk(abs, true, &links); err != nil {
		return fmt.Errorf("refusing %s as a cache of executable files: %w", dir, err)
	}
	return nil
}

// Check is Ensure without making anything: dir must exist.
func Check(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	links := 0
	if err := walk(abs, false, &links); err != nil {
		return fmt.Errorf("refusing %s as a cache of executable files: %w", dir, err)
	}
	return nil
}

// CheckFile checks a cached file before it is used: a regular file (not a link), owned by root or the running
// user, writable by no one else, in a directory that passes Check.
func CheckFile(path string) error {
	if err := Check(filepath.Dir(path)); err != nil {
		return err
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("refusing cached %s: not a regular file (%s)", path, fi.Mode().Type())
	}
	if err := trusted(path, fi, false); err != nil {
		return fmt.Errorf("refusing cached %s: %w", path, err)
	}
	return nil
}

// walk checks every component of the absolute, cleaned path p from the root down, making the missing ones when
// create is set. A symbolic link is followed only when its owner is trusted, and its target is checked the same
// way from its own root.
func walk(p string, create bool, links *int) error {
	cur := "/"
	fi, err := os.Lstat(cur)
	if err != nil {
		return err
	}
	if err := trusted(cur, fi, true); err != nil {
		return err
	}
	parts := strings.Split(strings.TrimPrefix(filepath.Clean(p), "/"), "/")
	for i, part := range parts {
		if part == "" {
			continue
		}
		last := i == len(parts)-1
		next := filepath.Join(cur, part)
		fi, err := os.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) && create {
			// Mkdir, not MkdirAll: each new component is checked before anything is made inside it. Losing a race
			// to someone else's mkdir is caught by the check below (the directory is then theirs).
			if err := os.Mkdir(next, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			fi, err = os.Lstat(next)
		}
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if err := trusted(next, fi, false); err != nil {
				return err
			}
			if *links++; *links > maxLinks {
				return fmt.Errorf("%s: too many symbolic links", next)
			}
			target, err := os.Readlink(next)
			if err != nil {
				return err
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(cur, target)
			}
			// The target is checked from the root: a trusted link may still point into another user's directory.
			if err := walk(filepath.Clean(target), create && last, links); err != nil {
				return err
			}
			resolved, err := filepath.EvalSymlinks(next)
			if err != nil {
				return err
			}
			cur = resolved
			if last {
				return own(cur)
			}
			continue
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", next)
		}
		if err := trusted(next, fi, !last); err != nil {
			return err
		}
		cur = next
	}
	return own(cur)
}

// own checks that the cache directory itself is the running user's: root's objects in a directory that root
// made for another user are not that user's to trust.
func own(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil // no owner to read (not a Unix file system)
	}
	if uid := os.Geteuid(); int(st.Uid) != uid {
		return fmt.Errorf("%s is owned by uid %d, not by the running user (uid %d)", dir, st.Uid, uid)
	}
	return nil
}

// trusted checks one path component: owned by root or the running user and not writable by group or others;
// a directory on the way (passThrough) may be writable by others when it is sticky, as /tmp is.
func trusted(path string, fi fs.FileInfo, passThrough bool) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	uid := os.Geteuid()
	if st.Uid != 0 && int(st.Uid) != uid {
		return fmt.Errorf("%s is owned by uid %d, not by root or the running user (uid %d)", path, st.Uid, uid)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil // a link's own mode bits mean nothing
	}
	if fi.Mode().Perm()&0o022 != 0 && !(passThrough && fi.Mode()&fs.ModeSticky != 0) {
		return fmt.Errorf("%s is writable by group or others (mode %v)", path, fi.Mode().Perm())
	}
	return nil
}
