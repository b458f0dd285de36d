// Package compare implements `k8sguide compare`.
package compare

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/engines"
	ktrace "github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/live"
	"github.com/k8sguide/k8sguide/inspect/render"
	"github.com/k8sguide/k8sguide/inspect/request"
	"github.com/k8sguide/k8sguide/inspect/stages"
	"github.com/k8sguide/k8sguide/inspect/tracer"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/providers"
	"github.com/k8sguide/k8sguide/lab/workload"
	"github.com/k8sguide/k8sguide/scenarios"
)

type flags struct {
	Names, Snapshots    []string
	Dataplanes          string
	Dst, Service, From  string
	Node, Proto, Output string
	ClusterIP           bool
}

// NewCommand returns the compare command.
func NewCommand(streams lab.Streams) *cobra.Command {
	f := &flags{}
	cmd := &cobra.Command{
		Use:   "compare (--name LAB ... | --snapshot FILE ... | --dataplanes DP,DP,...) (--service NAME | --dst IP:PORT)",
		Short: "One packet through several dataplanes side by side, stage by stage: match, Service, endpoint choice, DNAT, SNAT, source seen, reply",
		Example: "  k8sguide compare --name cmp-ipt --name cmp-nft --name cmp-ebp --service web\n" +
			"  k8sguide compare --name cmp-ipt --name cmp-nft --service web --cluster-ip --from pod/web\n" +
			"  k8sguide compare --dataplanes iptables,nftables,ebpf --service web -o html > compare.html",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runE(cmd, f, streams)
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&f.Names, "name", nil, "a running lab, one per dataplane (repeat the flag)")
	fl.StringArrayVar(&f.Snapshots, "snapshot", nil, "a snapshot `FILE` (k8sguide snapshot), one per dataplane (repeat the flag): offline")
	fl.StringVar(&f.Dataplanes, "dataplanes", "", "build a short-lived netns lab per dataplane (e.g. iptables,nftables,ebpf), deploy web, expose it, trace, and remove the labs")
	fl.StringVar(&f.Service, "service", "", "the Service ([NAMESPACE/]NAME[:PORT]) whose NodePort (or, with --cluster-ip, ClusterIP) each source is asked about")
	fl.BoolVar(&f.ClusterIP, "cluster-ip", false, "with --service: its ClusterIP and port instead of the node's NodePort")
	fl.StringVar(&f.Dst, "dst", "", "instead of --service: the destination IP:PORT (the same in every source)")
	fl.StringVar(&f.From, "from", "client", "where the packet starts: client, node or pod/NAME (NAME: a pod, or a Deployment, whose pod on the node is taken)")
	fl.StringVar(&f.Node, "node", "", "the node whose rules the packet meets, in each lab (e.g. worker2; default: the pod's node, else the node that owns --dst, else with --service the lab's last node)")
	fl.StringVar(&f.Proto, "proto", "tcp", "tcp or udp")
	fl.StringVarP(&f.Output, "output", "o", "table", "table (fits the terminal), json or html (a self-contained page)")
	return cmd
}

// source is one column's origin: a running lab, a snapshot file, or a lab this command builds.
type source struct {
	label string // "lab NAME", "snapshot FILE"
	lab   string // the lab's name ("" for a snapshot)
	file  string
}

// MaxSources bounds the columns of one comparison (--name and --snapshot together).
const MaxSources = 8

// check refuses flags that do not go together, before any source is read or lab built.
func (f *flags) check() error {
	given := 0
	for _, set := range []bool{len(f.Names) > 0, len(f.Snapshots) > 0, f.Dataplanes != ""} {
		if set {
			given++
		}
	}
	if given != 1 {
		return fmt.Errorf("say what to compare with one of --name LAB (repeated), --snapshot FILE (repeated) or --dataplanes DP,DP,...; they do not mix")
	}
	if err := f.packet().Check(); err != nil {
		return err
	}
	if f.Proto != "tcp" && f.Proto != "udp" {
		return fmt.Errorf("--proto %q: want tcp or udp", f.Proto)
	}
	if len(f.Snapshots) > 0 && f.Node != "" {
		return fmt.Errorf("--node picks a lab's node; a snapshot is of one node already")
	}
	if n := len(f.Names) + len(f.Snapshots); n > MaxSources {
		return fmt.Errorf("%d sources: compare puts at most %d side by side", n, MaxSources)
	}
	return nil
}

func runE(cmd *cobra.Command, f *flags, streams lab.Streams) error {
	format, err := render.ParseFormat(f.Output, render.Table, render.JSON, "html")
	if err != nil {
		return err
	}
	if err := f.check(); err != nil {
		return err
	}
	var sources []source
	for _, s := range f.Snapshots {
		sources = append(sources, source{label: "snapshot " + s, file: s})
	}
	for _, n := range f.Names {
		sources = append(sources, source{label: "lab " + n, lab: n})
	}
	ctx := cmd.Context()
	if f.Dataplanes != "" {
		var ds []dataplanes.Name
		for _, s := range strings.Split(f.Dataplanes, ",") {
			d, err := engines.Parse(strings.TrimSpace(s))
			if err != nil {
				return fmt.Errorf("--dataplanes: %w", err)
			}
			// A lab is built per entry: a repeated one would only build the same lab again (and a long list,
			// many labs on a small machine).
			if slices.Contains(ds, d) {
				return fmt.Errorf("--dataplanes: %s is named twice", d)
			}
			ds = append(ds, d)
		}
		labs, cleanup, err := shortLived(ctx, ds, streams.Err)
		// Removed whatever happens next: success, failure, Ctrl-C (the context is cancelled; removal is not).
		defer cleanup()
		if err != nil {
			return err
		}
		for _, n := range labs {
			sources = append(sources, source{label: "lab " + n, lab: n})
		}
	}
	q := stages.Question{Service: f.Service, ClusterIP: f.ClusterIP, Dst: f.Dst, From: f.From, Node: f.Node}
	var cols []stages.Column
	for _, src := range sources {
		t, err := traceOf(ctx, src, f, streams.In)
		if err != nil {
			return fmt.Errorf("%s: %w", src.label, err)
		}
		cols = append(cols, stages.NewColumn(src.label, t))
	}
	if f.Dst != "" && len(cols) > 1 {
		if err := sameService(f.Dst, cols); err != nil {
			return err
		}
	}
	c := stages.Compare(q, cols)
	switch format {
	case render.JSON:
		return render.WriteData(streams.Out, render.JSON, c)
	case "html":
		return render.CompareHTML(ctx, streams.Out, c)
	}
	return render.CompareTable(streams.Out, render.Width(streams.Out), c)
}

// sameService checks that --dst is the same packet everywhere: NodePorts and node addresses are each lab's own,
// so one lab's IP:PORT is most often nothing, or another Service, in the next.
func sameService(dst string, cols []stages.Column) error {
	same := true
	var each []string
	for _, c := range cols {
		what := c.Service
		if what == "" {
			what = "no Service, " + c.Verdict
		}
		same = same && c.Service != "" && c.Service == cols[0].Service
		each = append(each, c.Source+": "+what)
	}
	if same {
		return nil
	}
	return fmt.Errorf("--dst %s is not the same packet in every source (%s): each lab has its own node addresses and NodePorts; use --service NAME to take each one's own",
		dst, strings.Join(each, "; "))
}

// packet is the packet the flags name, for package request.
func (f *flags) packet() request.Flags {
	return request.Flags{Node: f.Node, Service: f.Service, Dst: f.Dst, From: f.From, Proto: f.Proto, ClusterIP: f.ClusterIP}
}

// traceOf traces the packet in one source: a snapshot's node, or the lab's node package request's rule picks.
func traceOf(ctx context.Context, src source, f *flags, in io.Reader) (*ktrace.Trace, error) {
	if src.file != "" {
		s, err := tracer.LoadFile(src.file, in, nil)
		if err != nil {
			return nil, err
		}
		pk, err := f.packet().OnNode(s)
		if err != nil {
			return nil, err
		}
		return tracer.Trace(s, pk.Request)
	}
	p, err := providers.ForLab(src.lab)
	if err != nil {
		return nil, err
	}
	pk, err := live.Resolve(ctx, p, src.lab, f.packet())
	if err != nil {
		return nil, err
	}
	t, _, err := live.Trace(ctx, p, src.lab, pk.Node, pk.Request)
	return t, err
}

// shortLived builds a netns lab per dataplane, one after another (each takes both cores a while), with the
// guide's web Deployment exposed as a NodePort. cleanup removes every lab it began, whatever happened; it is
// valid even when err is not nil.
func shortLived(ctx context.Context, ds []dataplanes.Name, progress io.Writer) (names []string, cleanup func(), err error) {
	p, err := providers.New("netns")
	if err != nil {
		return nil, func() {}, err
	}
	var begun []string
	cleanup = func() {
		for _, n := range begun {
			// Not the command's context: after Ctrl-C it is cancelled, and the labs must still go.
			if err := p.Delete(context.Background(), n); err != nil && !isNotFound(err) {
				fmt.Fprintf(progress, "removing lab %s: %v\n", n, err)
			}
		}
	}
	seen := map[dataplanes.Name]bool{}
	for _, d := range ds {
		if seen[d] {
			return nil, cleanup, fmt.Errorf("--dataplanes names %s twice", d)
		}
		seen[d] = true
	}
	for _, d := range ds {
		name := fmt.Sprintf("cmp%d-%s", os.Getpid()%100000, d)
		if len(name) > 32 {
			name = name[:32]
		}
		fmt.Fprintf(progress, "Building short-lived lab %q (dataplane %s) ...\n", name, d)
		begun = append(begun, name)
		if err := p.Create(ctx, lab.Config{Name: name, Dataplane: d, Workers: 2}, io.Discard); err != nil {
			return nil, cleanup, fmt.Errorf("lab %s: %w", name, err)
		}
		if err := deployWeb(ctx, p, name); err != nil {
			return nil, cleanup, fmt.Errorf("lab %s: %w", name, err)
		}
		names = append(names, name)
	}
	return names, cleanup, nil
}

// deployWeb deploys the guide's web scenario and exposes it as a NodePort, as `deploy` and `nodeport` do, and
// returns once every node's dataplane serves it.
func deployWeb(ctx context.Context, p lab.Provider, name string) error {
	m, err := workload.ParseManifest(scenarios.Web)
	if err != nil {
		return err
	}
	w, err := p.Workloads(ctx, name)
	if err != nil {
		return err
	}
	if err := w.Apply(ctx, m.ConfigMaps, m.Deployments, m.Services, nil); err != nil {
		return err
	}
	svc, _, err := w.Expose(ctx, lab.ExposeOptions{Namespace: "default", Deployment: "web", Port: 80})
	if err != nil {
		return err
	}
	return live.WaitServing(ctx, p, name, func(s *v1.Service) bool { return s.Namespace == svc.Namespace && s.Name == svc.Name }, live.ServingTimeout)
}

func isNotFound(err error) bool {
	_, ok := err.(*lab.NotFoundError)
	return ok || os.IsNotExist(err)
}
