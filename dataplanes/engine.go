package dataplanes

import (
	"context"
	"encoding/json"
	"net/netip"
	"time"

	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// Engine is one dataplane's faces, each on its own part of a snapshot (plain JSON the engine alone reads): it
// collects its part on a node, recognises its part in a pasted dump, and opens a part for the walk. The snapshot,
// the tracer and verification know engines only through this contract and the optional faces below, and loop
// over package engines' list; an engine's folder holds all of its faces.
type Engine interface {
	Name() Name
	// Lab is the dataplane's lab face: how a lab runs it and the guide names it (see Lab).
	Lab() Lab
	// Live is what a running node's readers ask of the dataplane: how it serves, where it records its choices
	// (see Live).
	Live() Live
	// Collect reads this engine's part of a snapshot in the node the calling process runs in. A node without the
	// engine gives an empty Part and no error (most nodes have no IPVS table or Cilium maps). What could be read
	// only in part is reported through o.Missing.
	Collect(ctx context.Context, o CollectOptions) (Part, error)
	// Sniff takes a pasted dump (a tool's output, not a k8sguide snapshot), cleaned by the paste front end
	// (inspect/paste): ok is false when raw is not in one of this engine's formats; err says why a dump that is
	// does not parse. raw may hold several commands' outputs, each after a line "$ COMMAND" naming the command
	// that printed it as the paste showed it (`$ iptables -t nat -L -n -v`), which the reader uses as a hint, and
	// an output the paste shows whole (the next prompt or a closing fence follows it) is followed by an empty
	// prompt, "$ ": readers of formats without an end mark (`iptables -S`, `ipvsadm -Ln`) take an output
	// without one as possibly cut after its last line. raw is text (a string: the engines may keep slices of it,
	// as the iptables engine keeps its rules' text, and no engine pays a copy of an 8 MB dump to read it).
	Sniff(raw string) (s Sniffed, ok bool, err error)
	// Open makes a part ready for the walk.
	Open(part json.RawMessage, o OpenOptions) (*Opened, error)
}

// Sniffed is a pasted dump read by an engine.
type Sniffed struct {
	Part json.RawMessage
	// ReadAs says how each output in the dump was read, for the trace's note ("iptables -t nat -L -n -v (12
	// chains)").
	ReadAs []string
	// Local lists addresses the dump shows the node owns (IPVS virtual servers, bound on kube-ipvs0).
	Local []netip.Addr
	// Parsed is what Sniff parsed Part from, in the engine's own form, which the tracer hands back to the
	// engine's Open of that part (OpenOptions.Sniffed): a pasted dump of thousands of Services is parsed once.
	// A walk may change it in place, so it serves one Open. nil: Open parses Part.
	Parsed any
}

// CollectOptions is what a node's collector hands every engine.
type CollectOptions struct {
	// BPFFS is the directory of the node's pinned Cilium maps ("": Cilium's own place, when it holds them).
	BPFFS string
	// Missing records something that could not be read, and why; the snapshot lists it.
	Missing func(what string, err error)
	// Covered waits for the engines that collect Covers and returns the nf_tables tables they hold, for an
	// engine that lists nf_tables tables to leave them out.
	Covered func() []string
	// Scope, when set, asks for the part of the engine's state one packet's walk reaches rather than all of it
	// (a live `trace`): nil reads everything.
	Scope *Scope
}

// Scope is a collection for one packet (a live `trace`, tracer.CollectFor), so that a node with thousands of
// Services is not listed whole for one packet: the engine's Collect reads its entry points (the built-in chains
// of iptables-nft's tables), and its Open, given the same Scope inside the node, reads what the walk reaches as it
// reaches it. Collect again then writes the part from what was read. An engine that cannot read a part of its
// state reads all of it and leaves Read alone.
type Scope struct {
	// Context bounds the reads the walk makes inside Open.
	Context context.Context
	// Packet is the packet the walks follow, for the part to say what it was read for ("tcp to
	// 10.0.0.2:80 from client").
	Packet string
	// Read holds what the engine read, by its own keys ("nat/KUBE-SERVICES"), in its own form.
	Read map[string]string
}

// Scoped is a ruleset an engine read in part for one packet (CollectOptions.Scope): Unread names, in the
// engine's keys, what walks reached and the part lacks.
type Scoped interface{ Unread() []string }

// Part is one engine's share of a snapshot.
type Part struct {
	Data json.RawMessage // nil: the node has none of this engine
	// Covers names the nf_tables tables ("ip nat") whose rules this part holds: iptables-nft's tables are also
	// nf_tables tables, and listing them again with nft would translate every xt rule a second time.
	Covers []string
}

// OpenOptions is what the tracer hands an engine that opens its part.
type OpenOptions struct {
	// Node names the node the part was collected on, for messages ("" for a pasted dump).
	Node string
	// Covered holds the nf_tables tables ("nat") that engines opened before this one walk already.
	Covered map[string]bool
	// Parts names every engine whose part the snapshot holds (a pasted dump may hold one engine's rules
	// without the part they hand packets to).
	Parts []Name
	// Scope, inside the node a part read for one packet came from, lets the walk read what it reaches and the
	// part lacks (see Scope); nil elsewhere.
	Scope *Scope
	// Sniffed is what this engine's Sniff parsed the part from (Sniffed.Parsed), when the part is a pasted
	// dump's and this is its first Open; nil otherwise.
	Sniffed any
}

// Opened is a part ready for the walk.
type Opened struct {
	// Rulesets are walked hook by hook by the netfilter walker.
	Rulesets []netfilter.Ruleset
	// Covers names the nf_tables tables the rulesets hold (see OpenOptions.Covered).
	Covers []string
	// Serves says the part implements Services on the node (kube-proxy's rules, an IPVS table, Cilium's maps):
	// a snapshot that does not name its dataplane is taken to run the first engine in the list whose part serves.
	Serves bool
	// Supersedes names engines whose rules this one keeps around its own (IPVS mode keeps kube-proxy's rules in
	// iptables): when both serve, this engine is the dataplane.
	Supersedes []Name
	// Missing names what the part lacks that a Service's answer needs (the nat table, any base chain, the
	// IPVS table an IPVS-mode node's rules hand Services to): a path that ends untranslated is then unknown.
	Missing []string
	// MissingAfterFilter says every Missing item acts after the filter table's INPUT and FORWARD chains (the
	// IPVS table: IPVS takes a packet at LOCAL_IN, after filter INPUT): a drop or reject there stands without it.
	MissingAfterFilter bool
	// Walker, when set, walks a packet itself instead of the netfilter walker (Cilium's bpf_host takes the packet
	// at tc ingress, before netfilter, and redirects it past the node's stack). It is used when this engine is
	// the node's dataplane.
	Walker PacketWalker
}

// PacketWalker walks the first packet of a flow through an engine that is not a netfilter ruleset.
type PacketWalker interface {
	// Walk follows flow arriving on iif ("" for a packet the node makes itself) and returns its paths, the
	// notes of what was assumed, and the conntrack entry that decides an established flow.
	Walk(flow trace.Flow, iif string, fromNode bool, names netfilter.Names) ([]trace.Path, []string, *trace.Conntrack, error)
}

// Monitor is the face of an engine whose rules the kernel traces rule by rule: which monitor `--verify` runs
// (kerneltrace's "iptables": xtables-monitor --trace, or "nftables": nft monitor trace).
type Monitor interface {
	Monitor() string
}

// Checker is the face of an engine that keeps its own record of the choice it made for a flow (Cilium's
// conntrack entry, IPVS's connection entry): Check compares a verification's prediction with the record found
// in after, the engine's part of a snapshot taken once the real connection was made, and adds kernel events,
// rows and reasons to v. settled says the part the prediction came from was taken when the engine's counters
// were still (see Settler).
type Checker interface {
	Check(v *trace.Verification, after json.RawMessage, flow trace.Flow, settled bool)
	// Records says which of the engine's hops it records itself (checked by Check), which the kernel's rule
	// trace therefore does not report.
	Records(h trace.Hop) bool
}

// Settler is the face of an engine whose part holds counters the kernel refreshes on a period (IPVS's
// estimator, from which round robin's turn is read): a prediction from a part taken while they still move names
// the wrong turn, so verification reads the node again after Period until two reads are Same.
type Settler interface {
	Period() time.Duration
	Same(before, after json.RawMessage) bool
}
