package ebpf

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// The macros as Cilium v1.20.2's agent wrote them on a kind node of this project's kind ebpf lab (excerpt of
// /var/run/cilium/state/globals/node_config.h; tunnel mode, the chart's default, and the socket LB for pods).
const kindNodeConfig = `/*
 * Node-IPv6: fc00:f853:ccd:e793::3
 */
#define DSR_ENCAP_MODE 0
#define ENABLE_SOCKET_LB_FULL 1
#define ENABLE_SOCKET_LB_PEER 1
#define ENCAP_IFINDEX 4
#define IPV4_DIRECT_ROUTING 50336428
#define TUNNEL_MODE 1
`

func TestParseNodeConfig(t *testing.T) {
	nc, err := ParseNodeConfig([]byte(kindNodeConfig))
	if err != nil {
		t.Fatal(err)
	}
	if nc.SocketLB != SocketLBFull || !nc.TunnelMode {
		t.Errorf("got %+v, want the full socket LB and tunnel mode", nc)
	}
	host, err := ParseNodeConfig([]byte("#define ENABLE_SOCKET_LB_HOST_ONLY 1\n#define ENABLE_NODEPORT 1\n"))
	if err != nil || host.SocketLB != SocketLBHostOnly || host.TunnelMode {
		t.Errorf("host-only: %+v %v", host, err)
	}
	if _, err := ParseNodeConfig([]byte("not a header\n")); err == nil {
		t.Error("a file without #define lines was taken for node_config.h")
	}
}

// Where the socket LB covers pods (a Cilium node's ENABLE_SOCKET_LB_FULL), a pod's connect() to a ClusterIP is
// cil_sock4_connect's, not bpf_lxc's: the same slots, the pod's own address as the source, no service loopback
// address when it picks itself, and nothing in conntrack (kind ebpf lab: the pod saw its own address).
func TestWalkPodSocketLB(t *testing.T) {
	s := podState(t)
	s.NodeConfig = &NodeConfig{Path: NodeConfigPath, SocketLB: SocketLBFull}
	tr := walkFrom(t, s, "10.244.2.6:40000", "10.96.0.10:80", false)
	if tr.Verdict != trace.Delivered || len(tr.Paths) != 3 {
		t.Fatalf("verdict %s, %d paths", tr.Verdict, len(tr.Paths))
	}
	for _, p := range tr.Paths {
		if p.Hops[0].Chain != chainSock {
			t.Errorf("path to %s starts in %s, want %s", p.Endpoint.Addr(), p.Hops[0].Chain, chainSock)
		}
		if p.SNAT != "10.244.2.6" {
			t.Errorf("path to %s: the pod sees source %s, want the pod's own 10.244.2.6", p.Endpoint.Addr(), p.SNAT)
		}
		if p.Endpoint.Addr() == "10.244.2.6:80" && !strings.Contains(p.Egress, "no packet leaves") {
			t.Errorf("to itself: egress %q", p.Egress)
		}
	}
	// Host-only (the netns lab's build, or socketLB.hostNamespaceOnly): bpf_lxc as before.
	s.NodeConfig.SocketLB = SocketLBHostOnly
	tr = walkFrom(t, s, "10.244.2.6:40000", "10.96.0.10:80", false)
	if tr.Paths[0].Hops[0].Chain != chainContainer {
		t.Errorf("host-only socket LB: the walk starts in %s, want %s", tr.Paths[0].Hops[0].Chain, chainContainer)
	}
}

// In tunnel mode (the chart's default routing) the NodePort path to a backend on another node crosses the
// overlay, which the walk does not model: the source that backend sees is unknown, never the direct-routing
// SNAT address.
func TestWalkNodePortTunnelMode(t *testing.T) {
	s := podState(t)
	s.Configs[0].LBDefaultAlg = AlgRandom // podState's bpf_host uses Maglev, with no table for this frontend
	s.NodeConfig = &NodeConfig{Path: NodeConfigPath, SocketLB: SocketLBFull, TunnelMode: true}
	tr := walkFrom(t, s, "172.18.0.1:40000", "172.18.0.2:30510", false)
	remote, local := 0, 0
	for _, p := range tr.Paths {
		if p.Endpoint == nil {
			t.Fatalf("a path without an endpoint: %+v (verdict %s, notes %q)", p, tr.Verdict, tr.Notes)
		}
		if p.Endpoint.Addr() == "10.244.2.6:80" {
			local++
			if p.SNAT != "172.18.0.1" {
				t.Errorf("local backend: source %s, want the client's", p.SNAT)
			}
			continue
		}
		remote++
		if p.SNAT != trace.Unknown {
			t.Errorf("remote backend %s in tunnel mode: source %q, want unknown", p.Endpoint.Addr(), p.SNAT)
		}
	}
	if remote != 2 || local != 1 || !strings.Contains(strings.Join(tr.Notes, "\n"), "TUNNEL_MODE") {
		t.Errorf("remote %d local %d notes %q", remote, local, tr.Notes)
	}
}

// A pod's connect() to another node's NodePort: no frontend for that address on this node, so bpf_sock's
// wildcard lookup asks the ipcache whose address it is; a remote node's takes the 0.0.0.0 NodePort frontend and
// is translated at the socket, anything else goes on untranslated.
func TestWalkPodSocketLBWildcard(t *testing.T) {
	s := podState(t)
	s.NodeConfig = &NodeConfig{Path: NodeConfigPath, SocketLB: SocketLBFull}
	for i := range s.Configs {
		if s.Configs[i].MapID == 7 { // bpf_sock's, which carries the NodePort range as bpf_host's does
			s.Configs[i].NodePortMin, s.Configs[i].NodePortMax = 30000, 32767
		}
	}
	addIPCache := func(prefix string, id uint32) {
		p := netip.MustParsePrefix(prefix)
		k := IPCacheKey{PrefixLen: uint32(ipcacheStaticPrefix + p.Bits()), Family: EndpointIPv4, Address: p.Addr()}
		s.IPCache = append(s.IPCache, IPCacheEntry{Key: k, Value: RemoteEndpointInfo{Identity: id}, Raw: Raw{Key: mustRaw(t, k)}})
	}
	addIPCache("172.18.0.3/32", IdentityRemoteNode)
	addIPCache("0.0.0.0/0", 2) // world
	tr := walkFrom(t, s, "10.244.2.6:40000", "172.18.0.3:30510", false)
	if tr.Verdict != trace.Delivered || len(tr.Paths) != 3 || tr.Paths[0].Hops[0].Chain != chainSock {
		t.Fatalf("to a remote node's NodePort: verdict %s, %d paths", tr.Verdict, len(tr.Paths))
	}
	if !strings.Contains(tr.Paths[0].Hops[2].Verdict, "a remote node") {
		t.Errorf("the ipcache hop: %+v", tr.Paths[0].Hops[2])
	}
	tr = walkFrom(t, s, "10.244.2.6:40000", "203.0.113.9:30510", false)
	// Untranslated, and not the node's address: the stack routes it on (issue 35: it read "local").
	if tr.Verdict != trace.Delivered || len(tr.Paths) != 1 || tr.Paths[0].Endpoint != nil {
		t.Errorf("to a world address on a NodePort port: verdict %s, want delivered untranslated", tr.Verdict)
	}
}
