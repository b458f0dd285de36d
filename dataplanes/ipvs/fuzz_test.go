package ipvs

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
	"github.com/k8sguide/k8sguide/dataplanes/netstate"
	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// FuzzIPVSList feeds pastes of ipvsadm output (-Ln, -L with names, excerpts, with and without "$ COMMAND" lines)
// to the reader and walks a packet to what it read: nothing may panic, and what is read must hold together (a
// server without an unresolved part has its address; the part survives the snapshot's JSON).
func FuzzIPVSList(f *testing.F) {
	files, _ := filepath.Glob("testdata/paste-*.txt")
	files = append(files, "testdata/vm-ipvsadm-Ln.txt")
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
		f.Add("$ ipvsadm -L\n" + string(b))
	}
	f.Add("$ ipvsadm -L\nTCP  kubernetes.default.svc.clust rr\n  -> node1:6443                   Masq    1      0          0\nTCP  [fd00::1]:https rr persistent 60 mask 64\n  -> [fd00::2]:http-alt Route 1 0 0\nFWM  7 IPv6 wrr\n")
	f.Add("$ ipvsadm -Lnc\nIPVS connection entries\npro expire state       source             virtual            destination\nTCP 01:58  TIME_WAIT   172.18.0.1:40004   172.18.0.2:30080   10.244.0.4:8080\n$ ipvsadm -Ln\nTCP  172.18.0.2:30080 rr\n  -> 10.244.0.4:8080 Masq 1 0 0\n")
	f.Fuzz(func(t *testing.T, text string) {
		if l, err := ParseList(text); err == nil {
			check(t, l)
		}
		st, readAs, ok, err := ReadPaste(text)
		if !ok || err != nil {
			return
		}
		if len(readAs) == 0 {
			t.Fatalf("read with no read-as note")
		}
		check(t, st)
		for _, a := range st.LocalAddresses() {
			if !a.IsValid() || a.IsUnspecified() {
				t.Fatalf("local address %v", a)
			}
		}
		b, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Decode(b)
		if err != nil || !reflect.DeepEqual(normal(back), normal(st)) {
			t.Fatalf("JSON round trip: %v\n%+v\n%+v", err, back, st)
		}
		// Walk a packet to the first virtual server (or an address near it), from outside and from the node.
		dst, port := netip.MustParseAddr("10.96.0.1"), uint16(443)
		if len(st.Services) > 0 && st.Services[0].Address.Is4() {
			dst, port = st.Services[0].Address, st.Services[0].Port
		}
		net := netstate.FromLocalAddresses(append(st.LocalAddresses(), netip.MustParseAddr("192.168.1.10")))
		rs := []netfilter.Ruleset{&Ruleset{State: st, MasqueradeUnknown: true}}
		for _, proto := range []string{"tcp", "udp"} {
			flow := trace.Flow{Src: netip.MustParseAddr("192.168.1.1"), Sport: 40000, Dst: dst, Dport: port, Proto: proto}
			for _, o := range []netfilter.Origin{{Iif: "eth0"}, {FromNode: true}} {
				paths, _, _ := netfilter.Run(rs, &net, flow, o, nil)
				for _, p := range paths {
					if p.Verdict == trace.Unknown && len(p.Missing) == 0 {
						t.Fatalf("an unknown path that does not say what is missing: %+v", p)
					}
				}
			}
		}
	})
}

// normal makes a state comparable after a JSON round trip (nil and empty lists are the same there).
func normal(s *State) *State {
	c := *s
	c.Services = append([]VirtualServer{}, s.Services...)
	for i := range c.Services {
		if len(c.Services[i].RealServers) == 0 {
			c.Services[i].RealServers = nil
		}
	}
	if len(c.Connections) == 0 {
		c.Connections = nil
	}
	return &c
}

func check(t *testing.T, st *State) {
	t.Helper()
	for _, v := range st.Services {
		_ = v.Name()
		if !protocols[v.Protocol] || !isSchedulerName(v.Scheduler) {
			t.Fatalf("virtual server %q: protocol %q scheduler %q", v.Name(), v.Protocol, v.Scheduler)
		}
		if v.FWMark == 0 && !v.NoAddress && !v.Address.IsValid() {
			t.Fatalf("virtual server %q has neither an address nor a name", v.Name())
		}
		if v.NoAddress && v.Address.IsValid() || v.As == "" && (v.NoAddress || v.NoPort) {
			t.Fatalf("virtual server %q: %+v", v.Name(), v.Printed)
		}
		for _, r := range v.RealServers {
			_ = r.Line()
			if !forwardNames[r.Forward] || r.Weight < 0 || !r.NoAddress && !r.Address.IsValid() || strings.TrimSpace(r.As) != r.As {
				t.Fatalf("real server %q", r.Line())
			}
		}
	}
}
