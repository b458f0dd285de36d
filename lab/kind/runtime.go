package kind

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/k8sguide/k8sguide/lab"
	"golang.org/x/sync/errgroup"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"
	kindcmd "sigs.k8s.io/kind/pkg/cmd"
)

// Runtime is what the provider needs from kind and the container engine. The real one is kind's library on
// Docker; tests use a fake whose nodes record what is run in them.
type Runtime interface {
	// Create builds the cluster from cfg; on failure kind removes what it made unless retain is set.
	Create(name string, cfg *v1alpha4.Cluster, kubeconfig string, retain bool, wait time.Duration) error
	Delete(name, kubeconfig string) error
	// List names the kind clusters on this host (any, not only k8sguide's).
	List() ([]string, error)
	Nodes(name string) ([]nodes.Node, error)
	// KubeConfig is the cluster's kubeconfig for use from this host; ns are its nodes, as Nodes listed them.
	KubeConfig(name string, ns []nodes.Node) (string, error)
	// Gateway is the host's address on kind's Docker network: where NodePort traffic from the host comes from.
	Gateway(ctx context.Context) (string, error)
	// CgroupVersion is the cgroup version of the engine's host ("1" or "2"): kind's nodes run on its cgroups.
	CgroupVersion(ctx context.Context) (string, error)
	// HasImage says whether the engine holds image ref.
	HasImage(ctx context.Context, ref string) (bool, error)
	// LoadImages puts the engine's images refs into the nodes' containerd, as `kind load docker-image` does.
	LoadImages(ctx context.Context, ns []nodes.Node, refs []string) error
}

// EngineAnswers tells whether a Docker engine answers `docker info` (the CLI alone is not enough: these machines
// have the client and no engine). The error says why not, in one line.
func EngineAnswers(ctx context.Context) error {
	if _, err := exec.LookPath("docker"); err != nil {
		return errors.New("no docker command on PATH")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil || strings.TrimSpace(stdout.String()) == "" {
		msg := lab.FirstLine(stderr.String())
		if msg == "" && err != nil {
			msg = err.Error()
		}
		if msg == "" {
			msg = "docker info reports no server"
		}
		return fmt.Errorf("no Docker engine answers (%s)", msg)
	}
	return nil
}

// dockerRuntime is kind's library on Docker.
type dockerRuntime struct{ kind *cluster.Provider }

// NewDockerRuntime returns the real runtime; kind's progress (the ✓ lines) goes to stderr.
func NewDockerRuntime() Runtime {
	return &dockerRuntime{kind: cluster.NewProvider(cluster.ProviderWithDocker(), cluster.ProviderWithLogger(kindcmd.NewLogger()))}
}

func (d *dockerRuntime) Create(name string, cfg *v1alpha4.Cluster, kubeconfig string, retain bool, wait time.Duration) error {
	return d.kind.Create(name,
		cluster.CreateWithV1Alpha4Config(cfg),
		cluster.CreateWithKubeconfigPath(kubeconfig),
		cluster.CreateWithRetain(retain),
		cluster.CreateWithWaitForReady(wait),
		cluster.CreateWithDisplayUsage(false),
		cluster.CreateWithDisplaySalutation(false),
	)
}

// KindNetwork is the Docker network kind puts its nodes on (KIND_EXPERIMENTAL_DOCKER_NETWORK aside).
const KindNetwork = "kind"

// Delete removes the cluster. kind's Docker network stays, as kind leaves it: every kind cluster shares it, and
// a network made again may get another subnet, which would move the nodes' addresses a class has written down.
func (d *dockerRuntime) Delete(name, kubeconfig string) error { return d.kind.Delete(name, kubeconfig) }

func (d *dockerRuntime) List() ([]string, error) { return d.kind.List() }
func (d *dockerRuntime) Nodes(name string) ([]nodes.Node, error) {
	ns, err := d.kind.ListNodes(name)
	if err != nil {
		return nil, err
	}
	return inspected(ns), nil
}
func (d *dockerRuntime) KubeConfig(name string, ns []nodes.Node) (string, error) {
	if kc, ok, err := kubeconfigFrom(name, ns); ok {
		return kc, err
	}
	return d.kind.KubeConfig(name, false)
}

func (d *dockerRuntime) CgroupVersion(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.CgroupVersion}}").Output()
	if err != nil {
		return "", fmt.Errorf("docker info: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

func (d *dockerRuntime) HasImage(ctx context.Context, ref string) (bool, error) {
	cmd := exec.CommandContext(ctx, "docker", "image", "inspect", "--format", "{{.ID}}", ref)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if strings.Contains(stderr.String(), "No such image") || strings.Contains(stderr.String(), "No such object") {
			return false, nil
		}
		return false, fmt.Errorf("docker image inspect %s: %s", ref, lab.FirstLine(stderr.String()))
	}
	return true, nil
}

// LoadImages saves refs from the engine into one archive (docker save) and imports it into each node's
// containerd (kind's nodeutils.LoadImageArchive), the nodes in parallel: what `kind load docker-image` does.
func (d *dockerRuntime) LoadImages(ctx context.Context, ns []nodes.Node, refs []string) error {
	f, err := os.CreateTemp("", "k8sguide-images-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	cmd := exec.CommandContext(ctx, "docker", append([]string{"save"}, refs...)...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = f, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("docker save %s: %s", strings.Join(refs, " "), lab.FirstLine(stderr.String()))
	}
	g, _ := errgroup.WithContext(ctx)
	for _, n := range ns {
		g.Go(func() error {
			r, err := os.Open(f.Name())
			if err != nil {
				return err
			}
			defer r.Close()
			if err := nodeutils.LoadImageArchive(n, r); err != nil {
				return fmt.Errorf("node %s: %w", n, err)
			}
			return nil
		})
	}
	return g.Wait()
}

func (d *dockerRuntime) Gateway(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "docker", "network", "inspect", KindNetwork,
		"--format", "{{range .IPAM.Config}}{{.Gateway}} {{end}}").Output()
	if err != nil {
		return "", fmt.Errorf("docker network inspect kind: %w", err)
	}
	for _, gw := range strings.Fields(string(out)) {
		if !strings.Contains(gw, ":") {
			return gw, nil
		}
	}
	return "", errors.New("kind's Docker network has no IPv4 gateway")
}
