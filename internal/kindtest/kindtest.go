//go:build linux

// Package kindtest runs the real k8sguide binary against real kind clusters: the kind provider end to end, as a
// user drives it. The engine is the one DOCKER_HOST names, or the private one make kind-engine starts on machines
// without their own (internal/kindengine: then every k8sguide command runs in the engine's network namespace,
// where kind's nodes and published ports are). The node image is $K8SGUIDE_KIND_IMAGE: make test-kind builds the
// offline one (lab/kind/nodeimage) and sets it.
package kindtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/k8sguide/k8sguide/internal/kindengine"
)

// ImageEnv names the node image the tests use.
const ImageEnv = "K8SGUIDE_KIND_IMAGE"

// Env is where the tests run kind.
type Env struct {
	// Engine is the private engine, or nil for the engine DOCKER_HOST (or Docker's default) names.
	Engine *kindengine.Engine
	Image  string
	// Binary is the k8sguide under test; Dir holds it, the kubeconfig and the netns labs' state.
	Binary, Dir string
}

// Setup finds the engine and the image, and builds k8sguide into a directory of its own; the error says why the
// kind tests cannot run here (the caller skips with it). cleanup removes the directory.
func Setup() (env *Env, skip string, cleanup func(), err error) {
	cleanup = func() {}
	if os.Geteuid() != 0 {
		return nil, "needs root (kind's nodes are privileged containers; the private engine is a network namespace)", cleanup, nil
	}
	image := os.Getenv(ImageEnv)
	if image == "" {
		return nil, ImageEnv + " is not set: make test-kind builds the offline kind node image and runs these tests on it", cleanup, nil
	}
	env = &Env{Image: image}
	if e, err := kindengine.Load(""); err == nil {
		env.Engine = e
	}
	if err := env.docker("info", "--format", "{{.ServerVersion}}"); err != nil {
		return nil, fmt.Sprintf("no Docker engine answers (%v): make kind-engine starts a private one here", err), cleanup, nil
	}
	if err := env.docker("image", "inspect", "--format", "{{.ID}}", image); err != nil {
		return nil, fmt.Sprintf("the engine has no image %s (make kind-image builds the offline one)", image), cleanup, nil
	}
	dir, err := os.MkdirTemp("", "k8sguide-kindtest-")
	if err != nil {
		return nil, "", cleanup, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	os.Chmod(dir, 0o755)
	env.Dir = dir
	env.Binary = filepath.Join(dir, "k8sguide")
	// The Makefile's flags (-trimpath), so that make build's cache serves; beside k8sguide k8sguide-lab (kubectl,
	// the Cilium chart's install, the netns labs' programs) and the ebpf dataplane's netns node agent (a nested
	// module), for the netns labs the tests compare kind with.
	for _, pkg := range []string{"k8sguide", "k8sguide-lab"} {
		build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, pkg), "github.com/k8sguide/k8sguide/cmd/"+pkg)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return nil, "", cleanup, fmt.Errorf("building %s: %w", pkg, err)
		}
	}
	agent := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, "k8sguide-cilium"), ".")
	agent.Dir = filepath.Join("..", "..", "dataplanes", "ebpf", "cilium")
	agent.Stdout, agent.Stderr = os.Stderr, os.Stderr
	if err := agent.Run(); err != nil {
		return nil, "", cleanup, fmt.Errorf("building k8sguide-cilium: %w", err)
	}
	return env, "", cleanup, nil
}

// Kubeconfig is the file the tests' labs write their contexts to.
func (e *Env) Kubeconfig() string { return filepath.Join(e.Dir, "kubeconfig") }

func (e *Env) environ() []string {
	env := append(os.Environ(),
		"KUBECONFIG="+e.Kubeconfig(),
		"K8SGUIDE_STATE_DIR="+filepath.Join(e.Dir, "state"),
		// A classroom projector's width.
		"COLUMNS=100")
	if e.Engine != nil {
		env = append(env, e.Engine.Env()...)
	}
	return env
}

// Command is k8sguide with args, where the engine's networks are.
func (e *Env) Command(ctx context.Context, args ...string) *exec.Cmd {
	argv := append([]string{e.Binary}, args...)
	if e.Engine != nil {
		argv = e.Engine.Command(argv...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = e.environ()
	return cmd
}

// Run runs k8sguide and returns its standard output; standard error goes to the test log with it.
func (e *Env) Run(t testing.TB, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := e.Command(ctx, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	t.Logf("$ k8sguide %s  (%.1f s)\n%s%s", strings.Join(args, " "), time.Since(start).Seconds(), out.String(), errb.String())
	if err != nil {
		return out.String(), fmt.Errorf("k8sguide %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// MustRun is Run that fails the test on an error.
func (e *Env) MustRun(t testing.TB, args ...string) string {
	t.Helper()
	out, err := e.Run(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Docker runs the docker CLI on the engine and returns its output.
func (e *Env) Docker(args ...string) (string, error) {
	cmd := exec.Command("docker", args...)
	cmd.Env = e.environ()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("docker %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

func (e *Env) docker(args ...string) error {
	_, err := e.Docker(args...)
	return err
}

// Volumes are the engine's volumes now.
func (e *Env) Volumes() map[string]bool {
	out, _ := e.Docker("volume", "ls", "--quiet")
	vs := map[string]bool{}
	for _, v := range strings.Fields(out) {
		vs[v] = true
	}
	return vs
}

// Leftovers lists what the engine still holds of kind cluster name: its containers (kind labels them), volumes
// that were not there before (kind's nodes each have one), networks other than kind's own and Docker's, and its
// kubeconfig context in any of the test's kubeconfig files.
func (e *Env) Leftovers(name string, volumesBefore map[string]bool) []string {
	var left []string
	if out, err := e.Docker("ps", "-a", "--filter", "label=io.x-k8s.kind.cluster="+name, "--format", "{{.Names}}"); err != nil {
		left = append(left, err.Error())
	} else if f := strings.Fields(out); len(f) > 0 {
		left = append(left, "containers "+strings.Join(f, ", "))
	}
	var vols []string
	for v := range e.Volumes() {
		if !volumesBefore[v] {
			vols = append(vols, v)
		}
	}
	if len(vols) > 0 {
		sort.Strings(vols)
		left = append(left, "volumes "+strings.Join(vols, ", "))
	}
	// kind's own network is kind's, shared by its clusters and kept (see lab/kind: Delete); any other is left over.
	if out, err := e.Docker("network", "ls", "--format", "{{.Name}}"); err == nil {
		for _, n := range strings.Fields(out) {
			if n != "kind" && n != "bridge" && n != "host" && n != "none" {
				left = append(left, "network "+n)
			}
		}
	}
	// $KUBECONFIG's file, and those a test gave up --kubeconfig (kubeconfig-NAME).
	files, _ := filepath.Glob(filepath.Join(e.Dir, "kubeconfig*"))
	for _, f := range files {
		if data, err := os.ReadFile(f); err == nil && bytes.Contains(data, []byte("name: kind-"+name+"\n")) {
			left = append(left, "the kubeconfig context kind-"+name+" in "+filepath.Base(f))
		}
	}
	return left
}

// RootState is what the tests must leave as it was in the root network namespace: its rules (nft, and iptables
// in both backends), routes, rules, links, addresses and net.* sysctls.
func RootState() string {
	var b strings.Builder
	for _, argv := range [][]string{
		{"nft", "list", "ruleset"},
		{"iptables-legacy-save"},
		{"iptables-nft-save"},
		{"ip", "-d", "route", "show", "table", "all"},
		{"ip", "rule"},
		{"ip", "-br", "link"},
		{"ip", "-br", "addr"},
		{"sysctl", "-a", "--pattern", `^net\.`},
	} {
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		if err != nil && len(out) == 0 {
			continue // a tool that is not installed here
		}
		fmt.Fprintf(&b, "$ %s\n", strings.Join(argv, " "))
		var lines []string
		for _, l := range strings.Split(string(out), "\n") {
			// Comments (dates) and counters change by themselves; so does the conntrack count.
			if strings.HasPrefix(l, "#") || strings.HasPrefix(l, "net.netfilter.nf_conntrack_count") {
				continue
			}
			lines = append(lines, l)
		}
		if argv[0] == "sysctl" {
			sort.Strings(lines)
		}
		b.WriteString(strings.Join(lines, "\n"))
	}
	return b.String()
}

// KernelSettings are the host-wide (not per-namespace) settings a kubelet changes at its start: kind's nodes
// change them on any host, and the private engine puts them back when it stops.
func KernelSettings() string {
	out, _ := exec.Command("sysctl", "vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops").Output()
	return strings.TrimSpace(string(out))
}
