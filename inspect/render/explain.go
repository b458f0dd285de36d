package render

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/stages"
)

// GuideNote is one short note, for the trace table, on where the rules this trace met differ from the older ones
// the guide shows: iptables' KUBE-EXT chains (Kubernetes 1.25 and later) with KUBE-MARK-MASQ in them; the
// nftables chains and maps that stand for the iptables chains the guide shows; Cilium's functions behind each
// map lookup. It is read from the hops the trace has (no KUBE-EXT hop, no KUBE-EXT sentence); "" when nothing
// differs.
func GuideNote(t *trace.Trace) string {
	switch {
	case hasHop(t, func(h trace.Hop) bool { return h.Function != "" }):
		return ebpfNote(t)
	case hasHop(t, func(h trace.Hop) bool { return strings.Contains(h.Table, " ") }):
		return nftablesNote(t)
	}
	return iptablesNote(t)
}

// allHops are every hop of every path, each once, in path order.
func allHops(t *trace.Trace) []trace.Hop {
	var out []trace.Hop
	for _, p := range t.Paths {
		for _, h := range p.Hops {
			if !slices.ContainsFunc(out, func(x trace.Hop) bool { return sameHopAndResult(x, h) }) {
				out = append(out, h)
			}
		}
	}
	return out
}

func hasHop(t *trace.Trace, f func(trace.Hop) bool) bool { return slices.ContainsFunc(allHops(t), f) }

func iptablesNote(t *trace.Trace) string {
	ext, masq := "", false
	for _, h := range allHops(t) {
		if !h.Matched || !strings.HasPrefix(h.Chain, "KUBE-EXT-") {
			continue
		}
		ext = h.Chain
		if strings.HasSuffix(h.Verdict, " KUBE-MARK-MASQ") {
			masq = true
		}
	}
	switch {
	case ext == "":
		return ""
	case masq:
		return fmt.Sprintf("since Kubernetes 1.25 NodePort and external traffic goes through a KUBE-EXT chain (%s here), "+
			"which jumps to KUBE-MARK-MASQ; the guide shows KUBE-MARK-MASQ in KUBE-SVC/KUBE-NODEPORTS directly.", ext)
	}
	return fmt.Sprintf("since Kubernetes 1.25 NodePort and external traffic goes through a KUBE-EXT chain (%s here) "+
		"on its way to KUBE-SVC; the guide shows KUBE-NODEPORTS jumping to KUBE-SVC directly.", ext)
}

func nftablesNote(t *trace.Trace) string {
	var eq []string
	add := func(guide, nft string) {
		if s := guide + " is " + nft; !slices.Contains(eq, s) {
			eq = append(eq, s)
		}
	}
	for _, h := range allHops(t) {
		switch {
		case h.Chain == "services" && strings.Contains(h.Text, "@service-ips"):
			add("KUBE-SERVICES", "the service-ips map")
		case h.Chain == "services" && strings.Contains(h.Text, "@service-nodeports") && h.Matched:
			add("KUBE-NODEPORTS", "the service-nodeports map")
		case strings.HasPrefix(h.Chain, "external-"):
			add("KUBE-EXT-…", h.Chain)
		case strings.HasPrefix(h.Chain, "service-") && strings.Contains(h.Text, "numgen"):
			add("KUBE-SVC-…", h.Chain+" (numgen)")
		case strings.HasPrefix(h.Chain, "endpoint-"):
			add("KUBE-SEP-…", h.Chain)
		case h.Chain == "masquerading":
			add("KUBE-POSTROUTING", "masquerading")
		}
	}
	if len(eq) == 0 {
		return ""
	}
	return "in nftables mode the guide's " + strings.Join(eq, ", ") + "."
}

// ebpfNote names the Cilium functions the trace went through, the guide's steps in bpf_host: the common ones
// once, then each path's own ending (SNAT, or delivery to a pod of this node).
func ebpfNote(t *trace.Trace) string {
	var per [][]string
	program := ""
	for _, p := range t.Paths {
		var steps []string
		add := func(s string) {
			if !slices.Contains(steps, s) {
				steps = append(steps, s)
			}
		}
		for _, h := range p.Hops {
			if program == "" && h.Chain != "" {
				program = h.Chain
			}
			fn := strings.TrimSuffix(h.Function, " (wildcard)")
			switch {
			case strings.Contains(fn, "lb4_lookup_service"):
				for _, f := range strings.Split(fn, " → ") {
					add(f)
				}
			case strings.Contains(fn, "lb4_select_backend_id"):
				f, _, _ := strings.Cut(fn, " → ")
				add(f)
			case strings.HasPrefix(fn, "sock_select_slot"):
				add("sock_select_slot") // the socket LB's choice, at connect()
			case strings.HasSuffix(fn, "lb4_dnat_request"):
				// lb4_dnat_request rewrites the packet with lb4_xlate (bpf/lib/lb.h).
				add("lb4_xlate")
			case strings.Contains(fn, "tail_nodeport_nat_egress_ipv4") && h.Matched:
				add("snat (" + fn + ")")
			case strings.Contains(fn, "__lookup_ip4_endpoint") && h.Matched && strings.HasPrefix(h.Verdict, "local endpoint"):
				add("local delivery")
			}
		}
		if len(steps) > 0 {
			per = append(per, steps)
		}
	}
	if len(per) == 0 {
		return ""
	}
	n := len(per[0])
	for _, s := range per[1:] {
		m := 0
		for m < n && m < len(s) && s[m] == per[0][m] {
			m++
		}
		n = m
	}
	chain := append([]string{}, per[0][:n]...)
	var ends []string
	for _, s := range per {
		if e := strings.Join(s[n:], " → "); e != "" && !slices.Contains(ends, e) {
			ends = append(ends, e)
		}
	}
	if len(ends) > 0 {
		chain = append(chain, strings.Join(ends, " / "))
	}
	// The object the walk's first program comes from (Cilium's bpf/ sources).
	object := map[string]string{"cil_sock4_connect": "bpf_sock", "cil_from_container": "bpf_lxc"}[program]
	if object == "" {
		object = "bpf_host"
	}
	if program != "" {
		chain = append([]string{program}, chain...)
	}
	return "no KUBE-* chains here: Cilium does the guide's steps in " + object + " functions, each map lookup in one: " +
		strings.Join(chain, " → ") + "."
}

// Explain prints a sentence per stage in the guide's terms, under a heading, fitted to width.
func Explain(w io.Writer, width int, ss []stages.Stage) {
	if width <= 0 {
		width = DefaultWidth
	}
	fmt.Fprintln(w, "\nIn the guide's terms:")
	for _, s := range ss {
		io.WriteString(w, Wrap("  "+s.Title+":", "    ", s.Guide, width))
	}
}
