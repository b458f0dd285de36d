// Package state keeps a netns lab's record on disk: its configuration and what it is made of (namespaces,
// processes, the apiserver's port), so that `down` removes exactly that. The lab's Kubernetes objects are its
// apiserver's (in etcd), not here. Writers hold an exclusive flock on the lab's lock file, so two commands on
// one lab never interleave; a save is an atomic rename, so readers never see half a file.
package state

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"

	"github.com/k8sguide/k8sguide/lab"
)

// DefaultRoot is where labs live. It is on tmpfs: network namespaces do not survive a reboot, nor should the
// state that describes them.
const DefaultRoot = "/run/k8sguide"

// Root returns the state root: $K8SGUIDE_STATE_DIR, or DefaultRoot.
func Root() string {
	if d := os.Getenv("K8SGUIDE_STATE_DIR"); d != "" {
		return d
	}
	return DefaultRoot
}

// Phase tells how far a lab got.
type Phase string

const (
	Creating Phase = "creating"
	Ready    Phase = "ready"
)

// Lab is everything k8sguide knows about one lab.
type Lab struct {
	Config   lab.Config `json:"config"`
	Provider string     `json:"provider"`
	Phase    Phase      `json:"phase"`
	// Generation counts saves.
	Generation int64      `json:"generation"`
	Nodes      []lab.Node `json:"nodes"`
	// Namespaces lists every network namespace made for the lab, recorded before it is made, so that `down`
	// (or a failed `up`) removes exactly what is ours.
	Namespaces []string `json:"namespaces"`
	// InitPIDs maps each node to the pid of its init (the node container's PID 1's stand-in), which runs the
	// node's agent (the kubelet's).
	InitPIDs map[string]int `json:"initPIDs,omitempty"`
	// APIServerPort is the port on the host's loopback where the lab's apiserver answers, as kind publishes it.
	APIServerPort int `json:"apiServerPort,omitempty"`
	// BPFFS is the lab's private bpf filesystem (ebpf dataplane), recorded before it is mounted.
	BPFFS string `json:"bpffs,omitempty"`
	// Cgroup is the lab's cgroup v2 directory (ebpf dataplane: one child per node, which the node's processes
	// run in and its socket LB is attached to), recorded before it is made.
	Cgroup string `json:"cgroup,omitempty"`
}

// Node returns the named node.
func (l *Lab) Node(name string) (lab.Node, bool) {
	for _, n := range l.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return lab.Node{}, false
}

// Store is a directory of labs.
type Store struct{ Root string }

// Default is the store at Root().
func Default() Store { return Store{Root: Root()} }

// Dir is the directory of one lab; logs and proxy reports live there too.
func (s Store) Dir(name string) string { return filepath.Join(s.Root, name) }

// StatePath is the lab's state file. Every save replaces it by rename.
func (s Store) StatePath(name string) string { return filepath.Join(s.Dir(name), "state.json") }

// Handle is a lab locked for writing.
type Handle struct {
	Name  string
	store Store
	lock  *os.File
}

// ErrNoState says a lab's directory has no state file (lost, or a crash before the first save).
var ErrNoState = errors.New("has no state")

// ErrCorrupt says a lab's state file cannot be read.
var ErrCorrupt = errors.New("corrupt state")

// ErrExists says a lab of that name already exists.
var ErrExists = errors.New("already exists")

// Create makes a new lab directory and locks it. It fails with ErrExists if the lab exists.
func (s Store) Create(name string) (*Handle, error) {
	if err := os.MkdirAll(s.Root, 0o700); err != nil {
		return nil, err
	}
	if err := os.Mkdir(s.Dir(name), 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("lab %q %w (remove it with: k8sguide down --name %s)", name, ErrExists, name)
		}
		return nil, err
	}
	return s.lockDir(name)
}

// NeedsRootError is a permission error on the store. The store is root's (DefaultRoot is 0700, as the labs
// it describes need root), so what the user lacks is root, which the bare "permission denied" does not say.
type NeedsRootError struct {
	Path string
	Err  error
}

func (e *NeedsRootError) Error() string {
	return fmt.Sprintf("k8sguide needs root to read the netns labs' state (%s): run it with sudo", e.Path)
}

func (e *NeedsRootError) Unwrap() error { return e.Err }

// needsRoot makes a permission error on path a *NeedsRootError, and returns any other error as it is.
func needsRoot(err error, path string) error {
	if errors.Is(err, fs.ErrPermission) {
		return &NeedsRootError{Path: path, Err: err}
	}
	return err
}

// Lock waits for exclusive access to an existing lab.
func (s Store) Lock(name string) (*Handle, error) {
	if _, err := os.Stat(s.Dir(name)); err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return nil, needsRoot(err, s.Dir(name))
		}
		return nil, &lab.NotFoundError{Kind: "lab", Name: name, Known: s.mustList()}
	}
	h, err := s.lockDir(name)
	if err != nil {
		return nil, err
	}
	return h, nil
}

func (s Store) lockDir(name string) (*Handle, error) {
	path := filepath.Join(s.Dir(name), "lock")
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, &lab.NotFoundError{Kind: "lab", Name: name, Known: s.mustList()}
			}
			return nil, needsRoot(err, path)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return nil, fmt.Errorf("lock lab %s: %w", name, err)
		}
		// `down` removes the lock file while holding it; whoever waited on it holds a lock on nothing.
		var held, now syscall.Stat_t
		if syscall.Fstat(int(f.Fd()), &held) == nil && syscall.Stat(path, &now) == nil && held.Ino == now.Ino {
			return &Handle{Name: name, store: s, lock: f}, nil
		}
		f.Close()
		if _, err := os.Stat(s.Dir(name)); err != nil {
			return nil, &lab.NotFoundError{Kind: "lab", Name: name, Known: s.mustList()}
		}
	}
}

// Load reads the lab's state. A lab whose state was never saved (an `up` that just started) loads as empty.
func (h *Handle) Load() (*Lab, error) { return h.store.Read(h.Name) }

// Save writes the lab's state atomically and bumps its generation.
func (h *Handle) Save(l *Lab) error {
	l.Generation++
	data, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	tmp := h.store.StatePath(h.Name) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, h.store.StatePath(h.Name))
}

// Remove deletes the lab's directory (state, logs, lock) and releases the lock.
func (h *Handle) Remove() error {
	err := os.RemoveAll(h.store.Dir(h.Name))
	h.Close()
	return err
}

// Close releases the lock.
func (h *Handle) Close() {
	if h.lock != nil {
		h.lock.Close()
		h.lock = nil
	}
}

// Read loads a lab's state without locking; saves are atomic renames, so this never sees a torn file.
func (s Store) Read(name string) (*Lab, error) {
	data, err := os.ReadFile(s.StatePath(name))
	if errors.Is(err, os.ErrNotExist) {
		if _, derr := os.Stat(s.Dir(name)); derr != nil {
			if errors.Is(derr, fs.ErrPermission) {
				return nil, needsRoot(derr, s.Dir(name))
			}
			return nil, &lab.NotFoundError{Kind: "lab", Name: name, Known: s.mustList()}
		}
		return nil, fmt.Errorf("lab %s %w (%s is missing): remove what is left of it with: k8sguide down --name %s", name, ErrNoState, s.StatePath(name), name)
	}
	if err != nil {
		return nil, needsRoot(err, s.StatePath(name))
	}
	var l Lab
	if err := json.Unmarshal(data, &l); err != nil {
		return nil, fmt.Errorf("lab %s: %w %s (%v): remove what is left of it with: k8sguide down --name %s", name, ErrCorrupt, s.StatePath(name), err, name)
	}
	return &l, nil
}

// View is Read for callers that only look: the decoded state is shared and cached for as long as the file
// is the same (a save renames a new file into place, so a changed state is a different file). A command that
// asks for the lab several times (status, a node, the kubeconfig) decodes it once. The result must not be
// modified.
func (s Store) View(name string) (*Lab, error) {
	v, err := s.cached(name, func(r io.Reader) (any, error) {
		var l Lab
		return &l, json.NewDecoder(r).Decode(&l)
	})
	if err != nil || v == nil {
		return nil, err
	}
	return v.(*Lab), nil
}

// cached decodes a lab's state file with decode, once per file version.
func (s Store) cached(name string, decode func(io.Reader) (any, error)) (any, error) {
	path := s.StatePath(name)
	f, err := os.Open(path)
	if err != nil {
		// Not there: Read says why (no such lab, or a lab without its state).
		l, err := s.Read(name)
		if err != nil {
			return nil, err
		}
		data, _ := json.Marshal(l)
		return decode(bytes.NewReader(data))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	key := path
	var id fileID
	if st != nil {
		id = fileID{dev: uint64(st.Dev), ino: st.Ino, size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	}
	views.Lock()
	defer views.Unlock()
	if v, ok := views.m[key]; ok && st != nil && v.id == id {
		return v.value, nil
	}
	v, err := decode(bufio.NewReaderSize(f, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("lab %s: %w %s (%v): remove what is left of it with: k8sguide down --name %s", name, ErrCorrupt, path, err, name)
	}
	if st != nil {
		views.m[key] = view{id: id, value: v}
	}
	return v, nil
}

type fileID struct {
	dev, ino    uint64
	size, mtime int64
}

type view struct {
	id    fileID
	value any
}

var views = struct {
	sync.Mutex
	m map[string]view
}{m: map[string]view{}}

// List names the labs in the store.
func (s Store) List() ([]string, error) {
	entries, err := os.ReadDir(s.Root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, needsRoot(err, s.Root)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}

func (s Store) mustList() []string {
	names, _ := s.List()
	return names
}
