package request

import (
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/inspect/snapshot"
)

// names are lab L's, shaped as the guide's netns lab after `deploy` and `nodeport`: three nodes, web's three pods
// (two on worker2), web's NodePort Service, and a headless one and a UDP one beside it.
func names() *snapshot.Kubernetes {
	return &snapshot.Kubernetes{
		ClientIP: "172.18.0.1",
		Nodes: []snapshot.Node{
			{Name: "L-control-plane", IP: "172.18.0.2"}, {Name: "L-worker", IP: "172.18.0.3"}, {Name: "L-worker2", IP: "172.18.0.4"},
		},
		Pods: []snapshot.Pod{
			{Namespace: "default", Name: "web-6b4fbbd7c4-zzzzz", IP: "10.244.2.3", Node: "L-worker2"},
			{Namespace: "default", Name: "web-6b4fbbd7c4-frbn2", IP: "10.244.1.2", Node: "L-worker"},
			{Namespace: "default", Name: "web-6b4fbbd7c4-97h9q", IP: "10.244.2.2", Node: "L-worker2"},
			{Namespace: "kube-system", Name: "coredns-1", IP: "10.244.0.2", Node: "L-control-plane"},
		},
		Services: []snapshot.Service{
			{Namespace: "default", Name: "web", ClusterIP: "10.96.99.110", Ports: []snapshot.ServicePort{{Name: "http", Protocol: "TCP", Port: 80, NodePort: 31758}}},
			{Namespace: "default", Name: "db", ClusterIP: "None", Ports: []snapshot.ServicePort{{Protocol: "TCP", Port: 5432}}},
			{Namespace: "kube-system", Name: "kube-dns", ClusterIP: "10.96.0.10", Ports: []snapshot.ServicePort{{Name: "dns", Protocol: "UDP", Port: 53}, {Name: "dns-tcp", Protocol: "TCP", Port: 53}}},
		},
	}
}

// TestInLab pins the node rule and the packet for each way of naming it, and the refusals, one line each.
func TestInLab(t *testing.T) {
	for _, c := range []struct {
		name            string
		f               Flags
		node, dst, from string
		proto, err      string
	}{
		{name: "--node by short name", f: Flags{Node: "worker", Dst: "10.96.99.110:80"}, node: "L-worker", dst: "10.96.99.110:80", from: ""},
		{name: "--dst a node's address: that node", f: Flags{Dst: "172.18.0.3:31758"}, node: "L-worker", dst: "172.18.0.3:31758"},
		{name: "--node wins over --dst's owner", f: Flags{Node: "L-worker2", Dst: "172.18.0.3:31758"}, node: "L-worker2", dst: "172.18.0.3:31758"},
		{name: "--service: the last node's NodePort", f: Flags{Service: "web"}, node: "L-worker2", dst: "172.18.0.4:31758"},
		{name: "--service on --node", f: Flags{Service: "default/web:http", Node: "worker"}, node: "L-worker", dst: "172.18.0.3:31758"},
		{name: "--service --cluster-ip", f: Flags{Service: "web:80", ClusterIP: true}, node: "L-worker2", dst: "10.96.99.110:80"},
		{name: "--from a Deployment: its first pod by name, on that pod's node", f: Flags{Service: "web", ClusterIP: true, From: "pod/web"},
			node: "L-worker2", dst: "10.96.99.110:80", from: "pod/web-6b4fbbd7c4-97h9q"},
		{name: "--from a Deployment on --node", f: Flags{Dst: "10.96.99.110:80", From: "pod/default/web", Node: "worker"},
			node: "L-worker", dst: "10.96.99.110:80", from: "pod/default/web-6b4fbbd7c4-frbn2"},
		{name: "--from a pod: its node", f: Flags{Dst: "10.96.0.10:53", From: "pod/coredns-1", Proto: "udp"}, node: "L-control-plane", dst: "10.96.0.10:53", from: "pod/coredns-1", proto: "udp"},
		{name: "--service with --proto udp takes the UDP port", f: Flags{Service: "kube-system/kube-dns", ClusterIP: true, Proto: "udp"}, node: "L-worker2", dst: "10.96.0.10:53", proto: "udp"},

		{name: "a ClusterIP and no node", f: Flags{Dst: "10.96.99.110:80"},
			err: "--dst 10.96.99.110 is not a node address: say which node's rules to walk with --node (one of L-control-plane, L-worker, L-worker2)"},
		{name: "a pod on another node than --node", f: Flags{Dst: "10.96.99.110:80", From: "pod/web-6b4fbbd7c4-frbn2", Node: "worker2"},
			err: "--from pod/web-6b4fbbd7c4-frbn2 runs on L-worker, not L-worker2: a pod's packets meet its own node's rules"},
		{name: "no such pod", f: Flags{Dst: "10.96.99.110:80", From: "pod/nope"}, err: "--from pod/nope: no such pod, nor a pod of a Deployment nope (pods: "},
		{name: "no such node", f: Flags{Dst: "10.96.99.110:80", Node: "worker9"}, err: "--node: "},
		{name: "no such Service", f: Flags{Service: "nope"}, err: `no service named "default/nope"`},
		{name: "headless", f: Flags{Service: "db", ClusterIP: true}, err: "service default/db has no ClusterIP (headless)"},
		{name: "no NodePort", f: Flags{Service: "kube-system/kube-dns"}, err: "service kube-system/kube-dns has no NodePort (--cluster-ip for its ClusterIP)"},
		{name: "no such port", f: Flags{Service: "web:443"}, err: "service default/web has no tcp port 443"},
		{name: "a TCP Service asked for UDP", f: Flags{Service: "web", Proto: "udp"}, err: "service default/web has no udp port"},
		{name: "--service and --dst", f: Flags{Service: "web", Dst: "172.18.0.3:1"}, err: "--service and --dst both say where the packet goes: give one"},
		{name: "neither", f: Flags{Node: "worker"}, err: "--dst IP:PORT or --service NAME is required"},
		{name: "--cluster-ip without --service", f: Flags{Dst: "172.18.0.3:1", ClusterIP: true}, err: "--cluster-ip goes with --service"},
		{name: "a bad --dst", f: Flags{Dst: "172.18.0.3"}, err: `--dst "172.18.0.3": want IP:PORT`},
		{name: "a bad --src", f: Flags{Dst: "172.18.0.3:1", Src: "me"}, err: `--src "me": want IPv4 or IPv4:PORT`},
		{name: "a bad --service", f: Flags{Service: "a/b/c"}, err: `--service "a/b/c": want [NAMESPACE/]NAME[:PORT]`},
		{name: "a bad --from", f: Flags{Dst: "172.18.0.3:1", From: "pods/web"}, err: `--from "pods/web": want client, node or pod/NAME`},
		{name: "a bad --proto", f: Flags{Dst: "172.18.0.3:1", Proto: "icmp"}, err: `--proto "icmp": want tcp, udp or sctp`},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := c.f.InLab("L", names())
			if c.err != "" {
				if err == nil || !strings.HasPrefix(err.Error(), c.err) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("InLab(%+v) = %+v, %v; want one line beginning %q", c.f, p, err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("InLab(%+v): %v", c.f, err)
			}
			proto := c.proto
			if proto == "" {
				proto = "tcp"
			}
			if p.Node != c.node || p.Request.Dst != c.dst || p.Dst.String() != c.dst || p.From != c.from || p.Proto != proto {
				t.Errorf("InLab(%+v) = node %q dst %q (%v) from %q proto %q; want %q %q %q %q", c.f, p.Node, p.Request.Dst, p.Dst, p.From, p.Proto, c.node, c.dst, c.from, proto)
			}
		})
	}
}

// TestOnNode: a snapshot's packet meets its own node's rules; its names answer --service and --from pod/NAME, and a
// dump without names says so.
func TestOnNode(t *testing.T) {
	s := &snapshot.Snapshot{Node: "L-worker2", Kubernetes: names()}
	p, err := Flags{Service: "web"}.OnNode(s)
	if err != nil || p.Node != "L-worker2" || p.Request.Dst != "172.18.0.4:31758" {
		t.Errorf("--service web on worker2's snapshot = %+v, %v; want worker2's NodePort 172.18.0.4:31758", p, err)
	}
	p, err = Flags{Dst: "10.96.99.110:80", From: "pod/web"}.OnNode(s)
	if err != nil || p.From != "pod/web-6b4fbbd7c4-97h9q" {
		t.Errorf("--from pod/web on worker2's snapshot = %+v, %v; want the first of web's pods on worker2", p, err)
	}
	if _, err := (Flags{Dst: "10.96.99.110:80", From: "pod/web-6b4fbbd7c4-frbn2"}).OnNode(s); err == nil || !strings.Contains(err.Error(), "runs on L-worker, not L-worker2") {
		t.Errorf("a pod of another node on worker2's snapshot: %v; want it refused", err)
	}
	if _, err := (Flags{Dst: "10.96.99.110:80", Node: "worker"}).OnNode(s); err == nil || !strings.Contains(err.Error(), "a snapshot is of one node already") {
		t.Errorf("--node with a snapshot: %v; want it refused", err)
	}
	dump := &snapshot.Snapshot{}
	for _, f := range []Flags{{Service: "web"}, {Dst: "10.96.99.110:80", From: "pod/web"}} {
		if _, err := f.OnNode(dump); err == nil || !strings.Contains(err.Error(), "the input names no") {
			t.Errorf("%+v on a pasted dump: %v; want it to say the input names none", f, err)
		}
	}
	if p, err := (Flags{Dst: "172.18.0.3:31103", Src: "172.18.0.1:40001"}).OnNode(dump); err != nil || p.Node != "" || p.Src != "172.18.0.1:40001" {
		t.Errorf("--dst and --src on a pasted dump = %+v, %v", p, err)
	}
}
