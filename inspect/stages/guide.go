package stages

import (
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// guide says a stage in the guide's terms: the guide walks kube-proxy's iptables chains (KUBE-SERVICES,
// KUBE-NODEPORTS, KUBE-SVC, KUBE-SEP, KUBE-MARK-MASQ, KUBE-POSTROUTING); each sentence names what the trace's
// dataplane does in their place. A sentence only says what the stage's text shows.
func guide(r *reader, s Stage) string {
	g := guideSentence(r, s)
	shown := len(s.Paths) > 0 || s.Text != Unknown && s.Text != None && !strings.HasPrefix(s.Text, None+": ")
	if s.Key == Choice && shown {
		if local := r.t.EveryDelivered(func(p trace.Path) string { return p.LocalOnly }); local != "" {
			// A traffic policy of Local narrows the choice before any engine's way of making it.
			g = "Only among this node's endpoints (a traffic policy of Local, " + local + "). " + g
		}
	}
	return g
}

// guideSentence is a stage in the guide's terms, each engine's way.
func guideSentence(r *reader, s Stage) string {
	text := strings.Join(s.All(), " ")
	switch {
	case len(s.Paths) > 0:
	case s.Text == Unknown:
		return "The trace does not show this stage."
	case s.Text == None:
		return "Nothing is done at this stage."
	case strings.HasPrefix(s.Text, None+": "):
		return "Nothing is done at this stage: " + strings.TrimPrefix(s.Text, None+": ") + "."
	}
	has := func(sub string) bool { return strings.Contains(text, sub) }
	switch s.Key {
	case Match:
		switch r.family {
		case "iptables":
			if has("KUBE-NODEPORTS") {
				return "As in the guide: KUBE-SERVICES' last rule sends packets for the node's own addresses (addrtype LOCAL) to KUBE-NODEPORTS, where the NodePort's rule matches."
			}
			return "As in the guide: a KUBE-SERVICES rule for the Service's ClusterIP and port matches."
		case "ipvs":
			if has("KUBE-NODE-PORT") {
				return "The guide's KUBE-NODEPORTS is KUBE-NODE-PORT in IPVS mode: one rule matches every NodePort through an ipset."
			}
			return "In IPVS mode KUBE-SERVICES matches every ClusterIP through an ipset and lets IPVS translate it."
		case "nftables":
			maps := []string{}
			for _, m := range []string{"@service-ips", "@service-nodeports"} {
				if has(m) {
					maps = append(maps, m)
				}
			}
			return "Where the guide's KUBE-SERVICES and KUBE-NODEPORTS test rule after rule, the services chain looks the destination up in one verdict map (" + strings.Join(maps, ", ") + ")."
		case "ebpf":
			sentence := "Where the guide's KUBE-SERVICES and KUBE-NODEPORTS match rules, Cilium looks the frontend up in the cilium_lb4_services_v2 hash map, before netfilter sees the packet."
			if i := strings.Index(s.Text, ": drop ("); i >= 0 {
				sentence += " Here the lookup drops it" + strings.TrimPrefix(s.Text[i:], ": drop") + "."
			}
			return sentence
		}
	case Service:
		switch r.family {
		case "iptables":
			if has("KUBE-SVL-") {
				return "With a traffic policy of Local, which the guide does not show, the packet reaches the Service's KUBE-SVL chain, which holds only this node's endpoints, in place of its KUBE-SVC chain."
			}
			if has("KUBE-EXT-") {
				return "The packet reaches the Service's KUBE-SVC chain, as in the guide, but by way of a KUBE-EXT chain (Kubernetes 1.25 and later), which the guide does not show."
			}
			return "As in the guide, the packet reaches the Service's own KUBE-SVC chain."
		case "nftables":
			if has("local-") {
				return "With a traffic policy of Local, which the guide does not show, the packet reaches the Service's local-… chain (iptables' KUBE-SVL), which holds only this node's endpoints, in place of its service-… chain."
			}
			if has("external-") {
				return "The guide's KUBE-SVC chain is the service-… chain here, reached through the external-… chain (iptables' KUBE-EXT)."
			}
			return "The guide's KUBE-SVC chain is the service-… chain here."
		case "ipvs":
			return "In IPVS mode the Service is an IPVS virtual server per address and port; there is no KUBE-SVC chain."
		case "ebpf":
			return "The Service is the frontend's slot 0 (its backend count and rev-NAT id); there is no KUBE-SVC chain."
		}
	case Choice:
		switch r.family {
		case "iptables":
			if has("session affinity") {
				return "Session affinity, which the guide does not show: this client is in the endpoint's recent list (a KUBE-SVC rule with -m recent --rcheck), so it goes back to the endpoint it had, before any statistic rule draws; a new client gets 1/N."
			}
			if has("statistic") {
				return "As in the guide: the KUBE-SVC chain's statistic --mode random rules each take their share of what the rules above left, so every endpoint gets 1/N."
			}
			return "The KUBE-SVC chain's one rule sends the packet to its only endpoint."
		case "nftables":
			if has("session affinity") {
				return "Session affinity, which the guide does not show: this client's address is in the endpoint's affinity-… set, so the service chain sends it back to that endpoint before the numgen map draws; a new client gets 1/N."
			}
			return "In place of the guide's cascade of statistic rules, one numgen random mod N map gives every endpoint exactly 1/N."
		case "ipvs":
			return "No random rules: IPVS's scheduler hands new connections to the real servers in turn (round robin)."
		case "ebpf":
			if has("sticky") {
				return "Session affinity, which the guide does not show: cilium_lb4_affinity holds this client's backend, so no new choice is made; a new client gets 1/N."
			}
			if has("Maglev") || has("maglev") {
				return "In place of the guide's statistic rules, Maglev: the flow's hash picks the backend from a lookup table, each backend's chance its share of the table."
			}
			if has("established") {
				return "The flow's conntrack entry already names the backend: no new choice."
			}
			if has("sock_select_slot") {
				return "In place of the guide's statistic rules, the socket LB's sock_select_slot picks a backend slot at random when the socket connects, 1/N each."
			}
			return "In place of the guide's statistic rules, lb4_select_backend_id_random picks a backend slot at random, 1/N each."
		}
	case DNAT:
		switch r.family {
		case "iptables":
			return "As in the guide, the endpoint's KUBE-SEP chain DNATs to the pod's address and port."
		case "nftables":
			if has("endpoint-") {
				return "The guide's KUBE-SEP chain is the endpoint-… chain here; it DNATs to the pod."
			}
			return "The guide's KUBE-SEP DNAT is done by the service chain's numgen map itself: no per-endpoint chain."
		case "ipvs":
			return "IPVS rewrites the destination to the real server (Masq forwarding): the guide's KUBE-SEP DNAT."
		case "ebpf":
			if has("connect()") {
				return "No packet to the ClusterIP ever exists: the socket LB connects the socket straight to the backend."
			}
			return "lb4_dnat_request rewrites the destination in the packet (lb4_xlate), and a CT_SERVICE entry keeps the backend: the guide's KUBE-SEP DNAT and its conntrack entry in one."
		}
	case SNAT:
		switch r.family {
		case "iptables", "ipvs":
			switch {
			case has("KUBE-EXT-") && has("KUBE-MARK-MASQ"):
				return "The guide's KUBE-MARK-MASQ marks the packet and KUBE-POSTROUTING masquerades it; since Kubernetes 1.25 the mark is asked for in KUBE-EXT, not in KUBE-SVC or KUBE-NODEPORTS as the guide shows."
			case has("KUBE-MARK-MASQ") && len(s.Paths) > 0:
				return "As in the guide: only packets KUBE-MARK-MASQ marked are masqueraded by KUBE-POSTROUTING; the paths differ."
			case has("KUBE-MARK-MASQ"):
				return "As in the guide: KUBE-MARK-MASQ marks the packet and KUBE-POSTROUTING masquerades it."
			}
			return "No KUBE-MARK-MASQ mark, so KUBE-POSTROUTING leaves the source alone."
		case "nftables":
			return "The guide's KUBE-MARK-MASQ and KUBE-POSTROUTING are a mark set in kube-proxy's own chains and the masquerading chain that masquerades marked packets."
		case "ebpf":
			return "No mark and no KUBE-POSTROUTING: Cilium SNATs to the node's address itself (tail_nodeport_nat_egress_ipv4) when the backend is on another node; a backend on this node gets the packet as the client sent it."
		}
	case Source:
		return "The pod sees " + strings.Join(s.All(), "; ") + "."
	case Reply:
		switch r.family {
		case "ebpf":
			return "No netfilter conntrack: Cilium's own maps (cilium_snat_v4_external, cilium_lb4_reverse_nat) undo the translations in bpf_host."
		case "ipvs":
			return "conntrack undoes the masquerade and IPVS's connection entry the DNAT, so the client sees the answer come from where it sent."
		}
		return "As in the guide, conntrack undoes both translations on the way back, so the client sees the answer come from where it sent."
	}
	return ""
}
