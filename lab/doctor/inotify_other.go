//go:build !linux

package doctor

import "errors"

// errNotLinux: Inotify is Linux's budget; elsewhere there is none to read.
var errNotLinux = errors.New("inotify limits are Linux's")

// ReadInotify has nothing to read off Linux.
func ReadInotify(string, int) (Inotify, error) { return Inotify{}, errNotLinux }

// RaiseInotify has nothing to raise off Linux.
func RaiseInotify(string, int) (int, error) { return 0, errNotLinux }
