// Package request turns how a user names a packet — --node, --service, --cluster-ip, --from, --dst, --src,
// --proto — into the packet a trace walks and the node whose rules it meets. trace, compare, connect and
// verification read their flags here, against a lab's names or a snapshot's, so that one question gets one packet
// and one node whichever command asks it.
//
// The node rule, for a lab: --node (LAB-worker2 or worker2); else the node a --from pod runs on (a pod's packets
// meet its own node's rules); else the node that owns --dst; else, when --service names the packet, the lab's last
// node (a worker, the one the guide's examples use), whose NodePort or ClusterIP is taken. Anything else is
// refused with the lab's nodes named: which node's rules a ClusterIP meets is the user's choice. A snapshot is of
// one node: its packet meets that node's rules, and --node is refused.
package request

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/snapshot"
	"github.com/k8sguide/k8sguide/inspect/tracer"
	"github.com/k8sguide/k8sguide/lab"
)

// Flags are the command line's words for a packet, as the user typed them.
type Flags struct {
	Node    string // --node: a lab's node, full or short name
	Service string // --service [NAMESPACE/]NAME[:PORT]
	Dst     string // --dst IP:PORT
	Src     string // --src IP[:PORT]
	From    string // --from client, node or pod/[NAMESPACE/]NAME ("": client)
	Proto   string // --proto tcp, udp or sctp ("": tcp)
	// ClusterIP is --cluster-ip: --service's ClusterIP and port instead of a node's NodePort.
	ClusterIP bool
}

// Packet is a resolved packet: the request a trace walks (Dst and From as the source knows them: a Service's
// address, a pod's full name) on Node's rules.
type Packet struct {
	tracer.Request
	// Node is the node whose rules the packet meets: a lab's node, or a snapshot's own ("" when the snapshot
	// does not say).
	Node string
	// Dst is Request.Dst, parsed.
	Dst netip.AddrPort
}

// Check refuses what no source could answer, before anything is read: flags that do not go together, an address
// or a name that is not one.
func (f Flags) Check() error {
	switch {
	case f.Service != "" && f.Dst != "":
		return fmt.Errorf("--service and --dst both say where the packet goes: give one")
	case f.ClusterIP && f.Service == "":
		return fmt.Errorf("--cluster-ip goes with --service (instead of --dst): the Service's ClusterIP and port")
	case f.Service == "" && f.Dst == "":
		return fmt.Errorf("--dst IP:PORT or --service NAME is required")
	}
	if f.Dst != "" {
		if _, err := trace.ParseDst(f.Dst); err != nil {
			return fmt.Errorf("--dst %v", err)
		}
	}
	if f.Service != "" {
		if _, _, _, err := serviceRef(f.Service); err != nil {
			return err
		}
	}
	if f.Src != "" {
		if _, _, err := trace.ParseSrc(f.Src); err != nil {
			return fmt.Errorf("--src %v", err)
		}
	}
	switch f.proto() {
	case "tcp", "udp", "sctp":
	default:
		return fmt.Errorf("--proto %q: want tcp, udp or sctp", f.Proto)
	}
	return checkFrom(f.From)
}

// checkFrom refuses a --from that names no place a packet starts from.
func checkFrom(from string) error {
	switch from {
	case "", "client", "node":
		return nil
	}
	if _, _, ok := lab.PodRef(from); ok {
		return nil
	}
	return fmt.Errorf("--from %q: want client, node or pod/NAME", from)
}

func (f Flags) proto() string {
	if f.Proto == "" {
		return "tcp"
	}
	return strings.ToLower(f.Proto)
}

// InLab resolves the packet in a lab whose names are k (its nodes with their addresses and, when --service or
// --from pod/NAME is given, its pods and Services), by the package's node rule.
func (f Flags) InLab(labName string, k *snapshot.Kubernetes) (Packet, error) {
	if err := f.Check(); err != nil {
		return Packet{}, err
	}
	var nodes []string
	for _, n := range k.Nodes {
		nodes = append(nodes, n.Name)
	}
	node := ""
	if f.Node != "" {
		var err error
		if node, err = lab.ResolveNode(nodes, labName, f.Node); err != nil {
			return Packet{}, fmt.Errorf("--node: %w", err)
		}
	}
	p := Packet{Request: tracer.Request{Dst: f.Dst, Src: f.Src, Proto: f.proto(), From: f.From}}
	if _, _, isPod := lab.PodRef(f.From); isPod {
		pod, err := PickPod(k.Pods, f.From, node)
		if err != nil {
			return Packet{}, err
		}
		if pod.Node == "" {
			return Packet{}, fmt.Errorf("--from %s: the pod is not scheduled on a node yet", f.From)
		}
		node, p.From = pod.Node, PodFrom(f.From, pod)
	}
	if node == "" && f.Dst != "" {
		node = dstNode(k, f.Dst)
	}
	if node == "" && f.Service != "" && len(nodes) > 0 {
		node = nodes[len(nodes)-1]
	}
	if node == "" {
		ip, _, _ := strings.Cut(f.Dst, ":")
		if len(nodes) == 0 {
			return Packet{}, fmt.Errorf("lab %s has no nodes", labName)
		}
		return Packet{}, fmt.Errorf("--dst %s is not a node address: say which node's rules to walk with --node (one of %s)", ip, strings.Join(nodes, ", "))
	}
	p.Node = node
	return f.finish(p, k)
}

// OnNode resolves the packet on a snapshot of one node (s.Node; "" when a pasted dump does not say), with the
// snapshot's names.
func (f Flags) OnNode(s *snapshot.Snapshot) (Packet, error) {
	if err := f.Check(); err != nil {
		return Packet{}, err
	}
	if f.Node != "" {
		return Packet{}, fmt.Errorf("--node picks a lab's node; a snapshot is of one node already")
	}
	p := Packet{Request: tracer.Request{Dst: f.Dst, Src: f.Src, Proto: f.proto(), From: f.From}, Node: s.Node}
	k := s.Kubernetes
	if _, _, isPod := lab.PodRef(f.From); isPod {
		if k == nil {
			return Packet{}, fmt.Errorf("--from %s: the input names no pods; use --src POD_IP", f.From)
		}
		pod, err := PickPod(k.Pods, f.From, s.Node)
		if err != nil {
			return Packet{}, err
		}
		p.From = PodFrom(f.From, pod)
	}
	if f.Service != "" && k == nil {
		return Packet{}, fmt.Errorf("--service %s: the input names no Services (a pasted dump?): use --dst", f.Service)
	}
	return f.finish(p, k)
}

// finish sets the packet's destination: --dst, or --service's address on p.Node.
func (f Flags) finish(p Packet, k *snapshot.Kubernetes) (Packet, error) {
	if f.Service != "" {
		dst, err := f.serviceDst(k, p.Node)
		if err != nil {
			return Packet{}, err
		}
		p.Request.Dst = dst
	}
	var err error
	if p.Dst, err = trace.ParseDst(p.Request.Dst); err != nil {
		return Packet{}, fmt.Errorf("--dst %v", err)
	}
	return p, nil
}

// PodFrom is --from for the pod PickPod chose, in the words the user chose: pod/NAME, or pod/NAMESPACE/NAME when
// they named its namespace.
func PodFrom(from string, pod snapshot.Pod) string {
	if ns, _, _ := lab.PodRef(from); ns != "" {
		return "pod/" + ns + "/" + pod.Name
	}
	return "pod/" + pod.Name
}

// dstNode is the node of k that owns dst's address, "" when none does (a ClusterIP, an address outside the lab).
func dstNode(k *snapshot.Kubernetes, dst string) string {
	ap, err := netip.ParseAddrPort(dst)
	if err != nil {
		return ""
	}
	for _, n := range k.Nodes {
		if a, err := netip.ParseAddr(n.IP); err == nil && a == ap.Addr() {
			return n.Name
		}
	}
	return ""
}

// serviceRef reads --service [NAMESPACE/]NAME[:PORT] (namespace default; port "" for the Service's first).
func serviceRef(s string) (namespace, name, port string, err error) {
	name, port, _ = strings.Cut(s, ":")
	namespace, name, ok := strings.Cut(name, "/")
	if !ok {
		namespace, name = "default", namespace
	}
	if namespace == "" || name == "" || strings.Contains(name, "/") || strings.Contains(s, ":") && port == "" {
		return "", "", "", fmt.Errorf("--service %q: want [NAMESPACE/]NAME[:PORT]", s)
	}
	return namespace, name, port, nil
}

// serviceDst is where --service sends the packet: the ClusterIP and port of the Service's port (its first, or
// the one named or numbered) for the protocol asked, or with a NodePort, node's address and that NodePort.
func (f Flags) serviceDst(k *snapshot.Kubernetes, node string) (string, error) {
	ns, name, port, err := serviceRef(f.Service)
	if err != nil {
		return "", err
	}
	var known []string
	for _, svc := range k.Services {
		known = append(known, svc.Namespace+"/"+svc.Name)
		if svc.Namespace != ns || svc.Name != name {
			continue
		}
		if f.ClusterIP && (svc.ClusterIP == "" || svc.ClusterIP == "None") {
			return "", fmt.Errorf("service %s/%s has no ClusterIP (headless)", ns, name)
		}
		for _, sp := range svc.Ports {
			if port != "" && port != sp.Name && port != fmt.Sprint(sp.Port) || !strings.EqualFold(cmp.Or(sp.Protocol, "TCP"), f.proto()) {
				continue
			}
			if f.ClusterIP {
				return fmt.Sprintf("%s:%d", svc.ClusterIP, sp.Port), nil
			}
			if sp.NodePort == 0 {
				return "", fmt.Errorf("service %s/%s has no NodePort%s (--cluster-ip for its ClusterIP)", ns, name, forPort(port))
			}
			i := slices.IndexFunc(k.Nodes, func(n snapshot.Node) bool { return n.Name == node })
			if node == "" || i < 0 || k.Nodes[i].IP == "" {
				return "", fmt.Errorf("--service %s: the address of node %q, whose NodePort it is, is not known: use --dst", f.Service, node)
			}
			return fmt.Sprintf("%s:%d", k.Nodes[i].IP, sp.NodePort), nil
		}
		return "", fmt.Errorf("service %s/%s has no %s port%s", ns, name, f.proto(), forPort(port))
	}
	return "", &lab.NotFoundError{Kind: "service", Name: ns + "/" + name, Known: known}
}

func forPort(port string) string {
	if port == "" {
		return ""
	}
	return " " + port
}

// PickPod reads --from pod/NAME among pods: the pod of that name; else, since pod names differ from lab to lab, a
// pod of the Deployment NAME (NAME-<hash>-<id>), on node when given, the first by name. A pod of that name on
// another node than node is refused: a pod's packets meet its own node's rules.
func PickPod(pods []snapshot.Pod, from, node string) (snapshot.Pod, error) {
	ns, name, _ := lab.PodRef(from)
	var known []string
	var mine []snapshot.Pod
	for _, p := range pods {
		if ns != "" && p.Namespace != ns {
			continue
		}
		if p.Name == name {
			if node != "" && p.Node != "" && p.Node != node {
				return p, fmt.Errorf("--from %s runs on %s, not %s: a pod's packets meet its own node's rules", from, p.Node, node)
			}
			return p, nil
		}
		known = append(known, p.Name)
		if rest, ok := strings.CutPrefix(p.Name, name+"-"); ok && strings.Count(rest, "-") == 1 && (node == "" || p.Node == node) {
			mine = append(mine, p)
		}
	}
	if len(mine) > 0 {
		slices.SortFunc(mine, func(a, b snapshot.Pod) int { return strings.Compare(a.Name, b.Name) })
		return mine[0], nil
	}
	where := ""
	if ns != "" {
		where = " in namespace " + ns
	}
	if node != "" {
		where += " on " + node
	}
	if len(known) == 0 {
		return snapshot.Pod{}, fmt.Errorf("--from %s: no such pod, nor a pod of a Deployment %s (no pods%s)", from, name, where)
	}
	return snapshot.Pod{}, fmt.Errorf("--from %s: no such pod, nor a pod of a Deployment %s%s (pods: %s)", from, name, where, strings.Join(known, ", "))
}
