// Package stopclean removes what a test binary made when a signal stops it (Ctrl-C, kill, a CI job stopping
// it): a test stopped that way runs none of its cleanups, so its labs, its built binaries (hundreds of MB) and a
// VM's initramfs would stay behind.
package stopclean

import (
	"fmt"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
)

var (
	mu    sync.Mutex
	once  sync.Once
	paths []string
	first []func()
)

// Remove has path removed should a signal stop the process before Forget(path).
func Remove(path string) {
	install()
	mu.Lock()
	defer mu.Unlock()
	paths = append(paths, path)
}

// Forget undoes Remove(path), once the caller removed it itself.
func Forget(path string) {
	mu.Lock()
	defer mu.Unlock()
	paths = slices.DeleteFunc(paths, func(p string) bool { return p == path })
}

// First has f run, on a stop, before any path is removed (taking down labs whose state is in one).
func First(f func()) {
	install()
	mu.Lock()
	defer mu.Unlock()
	first = append(first, f)
}

func install() {
	once.Do(func() {
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
		go func() {
			sig := <-stop
			mu.Lock()
			fs, ps := slices.Clone(first), slices.Clone(paths)
			mu.Unlock()
			fmt.Fprintf(os.Stderr, "stopped by %v: removing what this run made\n", sig)
			for _, f := range fs {
				f()
			}
			for _, p := range ps {
				os.RemoveAll(p)
			}
			os.Exit(2)
		}()
	})
}
