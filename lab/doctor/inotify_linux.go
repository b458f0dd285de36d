package doctor

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ReadInotify reads the limits under procRoot (/proc) and counts the instances uid's processes hold (labs run as
// root: uid 0 is the budget they share).
func ReadInotify(procRoot string, uid int) (Inotify, error) {
	var in Inotify
	for _, l := range []struct {
		file string
		to   *int
	}{{"sys/fs/inotify/max_user_instances", &in.MaxInstances}, {"sys/fs/inotify/max_user_watches", &in.MaxWatches}} {
		data, err := os.ReadFile(filepath.Join(procRoot, l.file))
		if err != nil {
			return in, err
		}
		if *l.to, err = strconv.Atoi(strings.TrimSpace(string(data))); err != nil {
			return in, fmt.Errorf("%s: %w", l.file, err)
		}
	}
	procs, err := os.ReadDir(procRoot)
	if err != nil {
		return in, err
	}
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil || procUID(filepath.Join(procRoot, p.Name())) != uid {
			continue
		}
		fdDir := filepath.Join(procRoot, p.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if errors.Is(err, fs.ErrPermission) {
			in.Unreadable++
			continue
		}
		if err != nil {
			continue // gone
		}
		for _, fd := range fds {
			if target, err := os.Readlink(filepath.Join(fdDir, fd.Name())); err == nil && target == "anon_inode:inotify" {
				in.Instances++
			}
		}
	}
	return in, nil
}

// procUID is the real uid of the process whose /proc directory is dir (-1 when it cannot be read).
func procUID(dir string) int {
	data, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return -1
	}
	s := bufio.NewScanner(bytes.NewReader(data))
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "Uid:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				if n, err := strconv.Atoi(f[0]); err == nil {
					return n
				}
			}
		}
	}
	return -1
}

// RaiseInotify sets fs.inotify.max_user_instances to to, when it is lower: what `doctor --fix` does, as the
// user asked. The limit is the host's (each user's count of instances); it is not kept across a reboot.
func RaiseInotify(procRoot string, to int) (from int, err error) {
	path := filepath.Join(procRoot, "sys/fs/inotify/max_user_instances")
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	if from, err = strconv.Atoi(strings.TrimSpace(string(data))); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	if from >= to {
		return from, nil
	}
	return from, os.WriteFile(path, []byte(strconv.Itoa(to)), 0o644)
}
