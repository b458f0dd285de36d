// Package kindengine starts and stops a private Docker engine for the tests of the kind provider on machines that
// have no engine of their own (these do not): Debian's docker.io, on its own socket, data root, exec root and
// pidfile, in a network namespace of its own, with no iptables rules, no ip forwarding and no default bridge. It
// is a test harness, not the product: a user's kind runs on their own engine (Docker Desktop, a CI runner's).
//
// Why its own network namespace: kind makes a bridge network for its nodes, and a bridge in the root namespace
// is an interface and a route there. In the engine's namespace the root namespace's rules, routes and sysctls
// stay as they were; the lab's client ("this host" in kind's terms) is a process run in that namespace, which
// is where kind's published apiserver port (127.0.0.1) and the nodes' addresses are.
package kindengine

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Defaults for the one engine `make kind-engine` starts.
const (
	DefaultName = "k8sguide-kind"
	// StateEnv points the kind tests at an engine's state file (default: DefaultStateFile).
	StateEnv = "K8SGUIDE_KIND_ENGINE"
)

// DefaultStateFile is where a started engine records itself.
var DefaultStateFile = filepath.Join("/run", DefaultName, "engine.json")

// Engine is what a started engine is made of, recorded in its state file for Stop and for the tests.
type Engine struct {
	Name string `json:"name"`
	// NetNS is the network namespace the engine and everything kind makes live in (ip netns NAME).
	NetNS string `json:"netns"`
	// Host is the DOCKER_HOST of the engine's socket.
	Host    string `json:"dockerHost"`
	PID     int    `json:"pid"`
	Dir     string `json:"dir"`     // socket, exec root, pidfile, log, the runtime wrapper
	DataDir string `json:"dataDir"` // data root: images, containers, volumes
	// MadeModules says the engine's start made /lib/modules (kind bind-mounts it into every node), so Stop
	// removes it.
	MadeModules bool `json:"madeModules,omitempty"`
	// Sysctls are the host-wide kernel settings a kubelet changes at its start (vm.overcommit_memory,
	// kernel.panic, ...; not per network namespace, so kind's nodes change the host's), as they were before the
	// engine started: Stop puts them back.
	Sysctls map[string]string `json:"sysctls,omitempty"`
}

// LogFile is the engine's log.
func (e *Engine) LogFile() string { return filepath.Join(e.Dir, "dockerd.log") }

// Env is the environment a process needs to use the engine: DOCKER_HOST, plus the kind provider's own.
func (e *Engine) Env() []string { return []string{"DOCKER_HOST=" + e.Host} }

// Command is the argv prefix that runs a command where the engine's networks are: in its namespace.
func (e *Engine) Command(argv ...string) []string {
	return append([]string{"nsenter", "--net=" + filepath.Join("/run/netns", e.NetNS), "--"}, argv...)
}

// Load reads a started engine's state file ("" for the default); os.ErrNotExist when none was started.
func Load(file string) (*Engine, error) {
	if file == "" {
		file = os.Getenv(StateEnv)
	}
	if file == "" {
		file = DefaultStateFile
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var e Engine
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if e.NetNS == "" || e.Host == "" {
		return nil, errors.New(file + ": not an engine's state")
	}
	return &e, nil
}

func (e *Engine) save() error {
	data, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(e.Dir, "engine.json"), data, 0o644)
}

// kubeletSysctls are the host-wide settings kubelet's container manager sets at its start
// (pkg/kubelet/cm: setupKernelTunables, protectKernelDefaults off, as kind runs it).
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}
