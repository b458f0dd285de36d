// Package trace implements `k8sguide trace`.
package trace

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/spf13/cobra"

	ktrace "github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/live"
	"github.com/k8sguide/k8sguide/inspect/render"
	"github.com/k8sguide/k8sguide/inspect/request"
	"github.com/k8sguide/k8sguide/inspect/stages"
	"github.com/k8sguide/k8sguide/inspect/tracer"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/providers"
)

type flags struct {
	Name, Dst, Service, Src, Proto, Node, Snapshot, From, Output string
	InIface, OutIface                                            string
	LocalAddresses                                               []string
	Verify, Summary, Explain, ClusterIP                          bool
}

// NewCommand returns the trace command.
func NewCommand(streams lab.Streams) *cobra.Command {
	f := &flags{}
	cmd := &cobra.Command{
		Use:   "trace --dst IP:PORT [--node NODE | --snapshot FILE] [--verify]",
		Short: "Explain a packet's path through a node's rules: every rule, every endpoint's chance, the reply; --verify checks it against the kernel",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runE(cmd, f, streams)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.Name, "name", "", providers.NameUsage)
	fl.StringVar(&f.Dst, "dst", "", "destination IP:PORT (a node IP and NodePort, a ClusterIP and port, …)")
	fl.StringVar(&f.Service, "service", "", "instead of --dst: the NodePort of this Service ([NAMESPACE/]NAME[:PORT]) on the node (--node, else the lab's last)")
	fl.BoolVar(&f.ClusterIP, "cluster-ip", false, "with --service: its ClusterIP and port instead of --node's NodePort")
	fl.StringVar(&f.Src, "src", "", "source IP[:PORT] (default: the client's, node's or pod's own address)")
	fl.StringVar(&f.Proto, "proto", "tcp", "tcp, udp or sctp")
	fl.StringVar(&f.Node, "node", "", "node whose rules the packet meets (default: --from pod's node, else the one that owns --dst, else with --service the lab's last)")
	fl.StringVar(&f.Snapshot, "snapshot", "", "trace offline from `FILE` (- for stdin): a snapshot, or what iptables-save, -S or -L, nft list ruleset (or -j, or -f input), ipvsadm -L[n] printed, as pasted")
	fl.StringSliceVar(&f.LocalAddresses, "local-addresses", nil, "with --snapshot: the node's own addresses (for raw rule dumps)")
	fl.StringVar(&f.From, "from", "client", "where the packet starts: client, node or pod/NAME")
	fl.StringVar(&f.InIface, "in-iface", "", "with --snapshot: the interface the packet arrives on (default: the route back to its source, else eth0)")
	fl.StringVar(&f.OutIface, "out-iface", "", "with --snapshot of a dump without routes: the interface the node sends it out of (default eth0)")
	fl.StringVarP(&f.Output, "output", "o", "table", "table (fits the terminal), wide (every rule, whole), json, svg, html (a page: picture, table, JSON), dot")
	fl.BoolVar(&f.Summary, "summary", false, "only the verdict, each endpoint with its chance and the source it sees, and the reply")
	fl.BoolVar(&f.Verify, "verify", false, "send a real packet with kernel tracing on and compare hop by hop")
	fl.BoolVar(&f.Explain, "explain", false, "after the table, a sentence per stage (match, Service, endpoint, DNAT, SNAT, source, reply) in the guide's terms")
	return cmd
}

func runE(cmd *cobra.Command, f *flags, streams lab.Streams) error {
	format, err := render.ParseFormat(f.Output, "table", "wide", render.JSON, "svg", "html", "dot")
	if err != nil {
		return err
	}
	if err := f.check(format); err != nil {
		return err
	}
	if f.Snapshot != "" {
		return fromFile(cmd.Context(), streams, f, format)
	}
	return fromLab(cmd, streams, f, format)
}

// packet is the packet the flags name, for package request.
func (f *flags) packet() request.Flags {
	return request.Flags{Node: f.Node, Service: f.Service, Dst: f.Dst, Src: f.Src, From: f.From, Proto: f.Proto, ClusterIP: f.ClusterIP}
}

// check refuses flags that do not go together, before anything is read.
func (f *flags) check(format render.Format) error {
	if picture := format == "svg" || format == "html" || format == "dot"; picture && (f.Verify || f.Summary) {
		return fmt.Errorf("-o %s draws the trace; --verify and --summary print a table (or JSON)", format)
	}
	if err := f.packet().Check(); err != nil {
		return err
	}
	if f.Explain && (format != "table" && format != "wide" || f.Verify || f.Summary) {
		return fmt.Errorf("--explain adds a sentence per stage to the trace table: not with -o %s, --verify or --summary", format)
	}
	if f.Snapshot == "" && (f.InIface != "" || f.OutIface != "") {
		return fmt.Errorf("--in-iface and --out-iface apply to --snapshot input (a live node's own routes decide)")
	}
	if f.Snapshot != "" && f.Verify {
		return fmt.Errorf("--verify sends a real packet: it needs a live lab (--node), not --snapshot")
	}
	if f.Snapshot != "" && f.Node != "" {
		return fmt.Errorf("--node picks a lab's node; a snapshot is of one node already")
	}
	if f.Snapshot == "" && len(f.LocalAddresses) > 0 {
		if _, err := parseAddrs(f.LocalAddresses); err != nil {
			return err
		}
		return fmt.Errorf("--local-addresses applies to --snapshot input")
	}
	return nil
}

// fromLab traces (or verifies) the packet on a live lab's node, the one package request's rule picks.
func fromLab(cmd *cobra.Command, streams lab.Streams, f *flags, format render.Format) error {
	p, err := providers.ForLabFlag(&f.Name, cmd.Flags().Changed("name"))
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	pk, err := live.Resolve(ctx, p, f.Name, f.packet())
	if err != nil {
		return err
	}
	if f.Verify {
		return verify(ctx, streams, p, f, pk.Node, pk.Request, format)
	}
	t, s, err := live.Trace(ctx, p, f.Name, pk.Node, pk.Request)
	if err != nil {
		return err
	}
	if note := live.NamesNote(s); note != "" {
		t.Notes = append(t.Notes, note)
	}
	return write(ctx, streams.Out, t, f, format)
}

// verify sends a real packet and writes the comparison with the kernel's trace, whatever its result; a
// disagreement then exits non-zero in every format, so CI can rely on the exit code.
func verify(ctx context.Context, streams lab.Streams, p lab.Provider, f *flags, node string, req tracer.Request, format render.Format) error {
	v, err := live.Verify(ctx, p, f.Name, node, req)
	if err != nil {
		return err
	}
	if format == render.JSON {
		err = render.WriteData(streams.Out, render.JSON, v)
	} else {
		err = render.Verification(streams.Out, v, viewOptions(streams.Out, f, format))
	}
	if err != nil {
		return err
	}
	if v.Result != "agree" {
		return fmt.Errorf("the kernel disagrees with the prediction")
	}
	return nil
}

// fromFile traces the packet on a snapshot or a pasted dump, the one node it is of.
func fromFile(ctx context.Context, streams lab.Streams, f *flags, format render.Format) error {
	local, err := parseAddrs(f.LocalAddresses)
	if err != nil {
		return err
	}
	s, err := tracer.LoadFile(f.Snapshot, streams.In, local)
	if err != nil {
		return err
	}
	pk, err := f.packet().OnNode(s)
	if err != nil {
		return err
	}
	req := pk.Request
	req.InIface, req.OutIface = f.InIface, f.OutIface
	t, err := tracer.Trace(s, req)
	if err != nil {
		return err
	}
	return write(ctx, streams.Out, t, f, format)
}

func write(ctx context.Context, w io.Writer, t *ktrace.Trace, f *flags, format render.Format) error {
	switch format {
	case render.JSON:
		return render.WriteTraceJSON(w, t)
	case "dot":
		_, err := io.WriteString(w, render.TraceDOT(t))
		return err
	case "svg":
		svg, err := render.TraceSVG(ctx, t)
		if err == nil {
			_, err = w.Write(svg)
		}
		return err
	case "html":
		return render.TraceHTML(ctx, w, t)
	}
	o := viewOptions(w, f, format)
	if err := render.Trace(w, t, o); err != nil || !f.Explain {
		return err
	}
	render.Explain(w, o.Width, stages.Of(t))
	return nil
}

// viewOptions: the table fits the terminal (render.Width); -o wide prints everything however wide.
func viewOptions(w io.Writer, f *flags, format render.Format) render.TraceOptions {
	return render.TraceOptions{Wide: format == "wide", Width: render.Width(w), Summary: f.Summary}
}

func parseAddrs(ss []string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, s := range ss {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil || !a.Is4() {
			return nil, fmt.Errorf("--local-addresses: %q is not an IPv4 address", s)
		}
		out = append(out, a)
	}
	return out, nil
}
