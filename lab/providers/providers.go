// Package providers picks the lab provider for a command.
package providers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf/chart"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/kind"
	"github.com/k8sguide/k8sguide/lab/netns"
	"github.com/k8sguide/k8sguide/lab/state"
)

// Names are the values --provider takes.
var Names = []string{"auto", "kind", "netns"}

// Env, when set, is the default of --provider, and ForLab looks only there: netns tests pin it so a host
// with Docker does not send them to kind.
const Env = "K8SGUIDE_PROVIDER"

// Default is --provider's default: $K8SGUIDE_PROVIDER, else auto.
func Default() string {
	if v := os.Getenv(Env); v != "" {
		return v
	}
	return "auto"
}

// CiliumTimeout is how long `up` waits for Cilium's agents on kind.
const CiliumTimeout = 5 * time.Minute

// engineAnswers is kind.EngineAnswers; tests replace it.
var engineAnswers = kind.EngineAnswers

// Choose resolves --provider: "auto" is kind when a Docker engine answers and netns otherwise. The second
// result says which was chosen and why, for the user.
func Choose(ctx context.Context, name string) (string, string, error) {
	switch name {
	case "netns", "kind":
		return name, "", nil
	case "auto", "":
		if err := engineAnswers(ctx); err != nil {
			msg := fmt.Sprintf("Using the netns provider: %v (--provider kind needs one).", err)
			if len(msg) > 100 {
				// The engine's own words (the socket it tried, its help) overflow a classroom's terminal;
				// `docker info` repeats them for whoever wants kind.
				why, _, _ := strings.Cut(err.Error(), " (")
				msg = fmt.Sprintf("Using the netns provider: %s (--provider kind needs one; `docker info` says why).", why)
			}
			return "netns", msg, nil
		}
		return "kind", "Using the kind provider: a Docker engine answers (--provider netns builds the lab without Docker).", nil
	}
	return "", "", fmt.Errorf("unknown provider %q (want auto, kind or netns)", name)
}

// New returns the provider named by --provider, after Choose.
func New(name string) (lab.Provider, error) {
	switch name {
	case "netns":
		return netns.New()
	case "kind":
		return kind.New(installCilium)
	}
	return nil, fmt.Errorf("unknown provider %q (want auto, kind or netns)", name)
}

// installCilium is the ebpf dataplane on kind: Cilium's chart, the release the netns engine compiles, from src.
// Helm runs in k8sguide-lab (`k8sguide-lab cilium-chart`), which the CLI does not link: the chart is fetched
// (into a directory of its own, removed when the install is done or never comes) before the cluster is made,
// and installed once it is.
func installCilium(ctx context.Context, src kind.CiliumSource, progress io.Writer) (kind.CiliumInstall, error) {
	dir, err := os.MkdirTemp("", "k8sguide-cilium-chart-")
	if err != nil {
		return nil, err
	}
	fetchCtx, cancel := context.WithTimeout(ctx, CiliumTimeout) // a registry that hangs does not hang up
	defer cancel()
	out, err := runCiliumChart(fetchCtx, progress, "fetch", chart.Options{Local: src.Local}, "--dir", dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	chartPath := strings.TrimSpace(out)
	return func(ctx context.Context, kubeconfig string, cfg lab.Config, src kind.CiliumSource, progress io.Writer) error {
		defer os.RemoveAll(dir)
		_, err := runCiliumChart(ctx, progress, "install", CiliumOptions(cfg, src), "--chart", chartPath, "--kubeconfig", kubeconfig,
			"--timeout", CiliumTimeout.String())
		return err
	}, nil
}

// runCiliumChart runs `k8sguide-lab cilium-chart VERB --options O ARGS…`, its progress to progress, and returns
// what it printed on stdout; its error is the last line it wrote ("ERROR: …").
func runCiliumChart(ctx context.Context, progress io.Writer, verb string, o chart.Options, args ...string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	prog, err := lab.FindLabProgram(self)
	if err != nil {
		return "", err
	}
	opts, err := json.Marshal(o)
	if err != nil {
		return "", err
	}
	if progress == nil {
		progress = io.Discard
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, prog, append([]string{lab.LabCiliumChart, verb, "--options", string(opts)}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, io.MultiWriter(&progressLines{w: progress}, &stderr)
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if lines := strings.Split(strings.TrimSpace(stderr.String()), "\n"); strings.HasPrefix(lines[len(lines)-1], "ERROR: ") {
			return "", errors.New(strings.TrimPrefix(lines[len(lines)-1], "ERROR: "))
		}
		return "", fmt.Errorf("%s %s %s: %v", prog, lab.LabCiliumChart, verb, err)
	}
	return stdout.String(), nil
}

// progressLines passes k8sguide-lab's progress on line by line, without its final "ERROR: …", which the
// command's own error says.
type progressLines struct {
	w       io.Writer
	partial []byte
}

func (p *progressLines) Write(b []byte) (int, error) {
	p.partial = append(p.partial, b...)
	for {
		i := bytes.IndexByte(p.partial, '\n')
		if i < 0 {
			return len(b), nil
		}
		if line := p.partial[:i+1]; !bytes.HasPrefix(line, []byte("ERROR: ")) {
			if _, err := p.w.Write(line); err != nil {
				return len(b), err
			}
		}
		p.partial = p.partial[i+1:]
	}
}

// CiliumOptions are the chart options for a lab.
func CiliumOptions(cfg lab.Config, src kind.CiliumSource) chart.Options {
	return chart.Options{ClusterName: cfg.Name, LBAlgorithm: cfg.LBAlgorithm, NodePortRange: cfg.NodePortRange, PodSubnet: lab.PodSubnet, Local: src.Local, WithoutCapabilities: src.WithoutCapabilities, NoSocketLB: src.SharedCgroupNamespace}
}

// CiliumValues gives the Helm values and chart for `up --dry-run`: the local images and the chart in Cilium's
// source when a Docker engine answers and holds the images (as up would choose), else Cilium's published ones.
func CiliumValues(cfg lab.Config) (map[string]any, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var src kind.CiliumSource
	if kind.EngineAnswers(ctx) == nil {
		src, _ = kind.FindCiliumSource(ctx, kind.NewDockerRuntime())
	}
	v, err := chart.Values(CiliumOptions(cfg, src))
	if err != nil {
		return nil, "", err
	}
	if src.Local {
		dir, err := chart.SourceChartDir()
		if err != nil {
			return nil, "", err
		}
		return v, dir, nil
	}
	return v, fmt.Sprintf("%s --version %s", chart.ChartRepo, chart.Version()), nil
}

// NameUsage is the help of --name for a command that targets an existing lab (LabName says how it is chosen).
const NameUsage = "lab name (default: the only lab there is; " + lab.DefaultName + " when there is none)"

// ForLabFlag is ForLab for a command's --name: name points at the flag's value and set says whether the user
// gave it (cmd.Flags().Changed("name")). When not given, *name becomes LabName's choice, so that the command
// goes on with the lab it targets.
func ForLabFlag(name *string, set bool) (lab.Provider, error) {
	n, err := LabName(context.Background(), *name, set)
	if err != nil {
		return nil, err
	}
	*name = n
	return ForLab(n)
}

// LabName is the lab a command targets: --name's value when the user gave one; else the only lab there is, so
// that a lab made with another name needs no --name; else, with no lab at all, lab.DefaultName (whose "no lab
// named" error lists what exists). Several labs and no --name is an error naming them: picking one would act
// on a lab the user may not mean (down deletes it).
func LabName(ctx context.Context, name string, set bool) (string, error) {
	if set && name != "" {
		return name, nil
	}
	labs, err := Labs(ctx)
	if err != nil {
		return "", err
	}
	switch len(labs) {
	case 0:
		return lab.DefaultName, nil
	case 1:
		return labs[0], nil
	}
	return "", fmt.Errorf("several labs exist (%s): say which with --name", strings.Join(labs, ", "))
}

// netnsLabs and kindLabs list each provider's labs; tests replace them.
var (
	netnsLabs = func() ([]string, error) {
		names, err := state.Default().List()
		if err != nil {
			return nil, err
		}
		// And those whose state is gone, which only the kernel still shows (down removes them).
		return append(names, netns.KernelLabs(context.Background(), state.Default())...), nil
	}
	kindLabs = func(ctx context.Context) ([]string, error) {
		k, err := kind.New(installCilium)
		if err != nil {
			return nil, err
		}
		return k.List(ctx)
	}
)

// Fake is a provider that lists its labs itself (inspect/live/livetest's, over snapshots).
type Fake interface {
	lab.Provider
	Labs() []string
}

// fake, set by UseFake, holds every lab there is: tests of the commands that read a lab run them against it.
var fake Fake

// UseFake makes p the provider of every lab (ForLab, ForLabFlag, Labs) until restore is called; for tests, which
// then read labs without root or Docker.
func UseFake(p Fake) (restore func()) {
	old := fake
	fake = p
	return func() { fake = old }
}

// Labs names the labs that exist, sorted: the netns labs, and kind's clusters when a Docker engine answers. As
// ForLab, it looks only at $K8SGUIDE_PROVIDER's provider when that is set. A store this user may not read is
// an error (state.NeedsRootError) rather than no netns labs: the labs it hides would make the answer wrong.
func Labs(ctx context.Context) ([]string, error) {
	if fake != nil {
		return fake.Labs(), nil
	}
	var labs []string
	if os.Getenv(Env) != "kind" {
		names, err := netnsLabs()
		if err != nil {
			return nil, err
		}
		labs = append(labs, names...)
	}
	if os.Getenv(Env) != "netns" && engineAnswers(ctx) == nil {
		// A Docker engine that answers but whose clusters cannot be listed holds none we can use.
		if names, err := kindLabs(ctx); err == nil {
			labs = append(labs, names...)
		}
	}
	slices.Sort(labs)
	return slices.Compact(labs), nil
}

// ForLab returns the provider that holds the named lab: a netns lab of that name, else a kind cluster of that
// name when a Docker engine answers.
func ForLab(name string) (lab.Provider, error) {
	if err := lab.ValidateName(name); err != nil {
		return nil, err
	}
	if fake != nil {
		return fake, nil
	}
	switch os.Getenv(Env) {
	case "netns":
		return netns.New()
	case "kind":
		return kind.New(installCilium)
	}
	// A store this user may not read (root's) may still leave a kind cluster of that name, which needs no root.
	var denied error
	if _, err := state.Default().View(name); err == nil || errors.Is(err, state.ErrNoState) || errors.Is(err, state.ErrCorrupt) {
		return netns.New()
	} else if errors.Is(err, fs.ErrPermission) {
		denied = err
	} else if !isNotFound(err) {
		return nil, err
	}
	if engineAnswers(context.Background()) == nil {
		k, err := kind.New(installCilium)
		if err != nil {
			return nil, err
		}
		if clusters, err := k.List(context.Background()); err == nil {
			for _, c := range clusters {
				if c == name {
					return k, nil
				}
			}
		}
	}
	if denied != nil {
		return nil, denied
	}
	// Neither has it: netns says so, with the labs it knows.
	return netns.New()
}

func isNotFound(err error) bool {
	var nf *lab.NotFoundError
	return errors.As(err, &nf) || errors.Is(err, os.ErrNotExist)
}

// DryRun prints, for --provider kind, the kind config and Helm values `up` would use, as YAML or JSON; it
// needs no Docker.
func DryRun(provider string, cfg lab.Config, format string, out io.Writer) error {
	if provider != "kind" {
		return fmt.Errorf("--dry-run shows the kind config: use it with --provider kind (the netns lab has no config to show)")
	}
	pl, err := kind.MakePlan(cfg, CiliumValues)
	if err != nil {
		return err
	}
	var data []byte
	switch format {
	case "yaml", "":
		data, err = pl.YAML()
	case "json":
		data, err = json.MarshalIndent(pl, "", "  ")
		data = append(data, '\n')
	default:
		return fmt.Errorf("-o %q: want yaml or json", format)
	}
	if err != nil {
		return err
	}
	_, err = out.Write(data)
	return err
}
