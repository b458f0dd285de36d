package netstate

import (
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
)

// The sets kube-proxy's ipvs mode makes, one of each type it uses and a hash:net, with members of each shape:
// read over netlink they must be what `ipset save` prints for the same kernel state.
const ipsetRestore = `create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536
add KUBE-CLUSTER-IP 10.96.0.1,tcp:443
add KUBE-CLUSTER-IP 10.96.0.10,udp:53
add KUBE-CLUSTER-IP 10.96.0.11,sctp:9999
create KUBE-LOOP-BACK hash:ip,port,ip family inet hashsize 1024 maxelem 65536
add KUBE-LOOP-BACK 10.244.1.2,tcp:80,10.244.1.2
create KUBE-LOAD-BALANCER-SOURCE-CIDR hash:ip,port,net family inet hashsize 1024 maxelem 65536
add KUBE-LOAD-BALANCER-SOURCE-CIDR 172.18.0.100,tcp:80,10.0.0.0/8
add KUBE-LOAD-BALANCER-SOURCE-CIDR 172.18.0.100,tcp:80,192.168.1.1
create KUBE-NODE-PORT-TCP bitmap:port range 0-65535
add KUBE-NODE-PORT-TCP 30080
add KUBE-NODE-PORT-TCP 31000
create KUBE-IPVS-IPS hash:ip family inet hashsize 1024 maxelem 65536
add KUBE-IPVS-IPS 10.96.0.1
create SOME-NETS hash:net family inet hashsize 1024 maxelem 65536
add SOME-NETS 10.0.0.0/8
add SOME-NETS 192.168.7.0/24
create KUBE-EMPTY hash:ip,port family inet hashsize 1024 maxelem 65536
`

func TestReadIPSetsAsIPSetSave(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a network namespace of its own")
	}
	if _, err := exec.LookPath("ipset"); err != nil {
		t.Skip("needs the ipset tool to make the sets and print them")
	}
	// A namespace of this test's own, unnamed: it goes when the last handle on it closes.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	defer netns.Set(orig)

	restore := exec.Command("ipset", "restore")
	restore.Stdin = strings.NewReader(ipsetRestore)
	if out, err := restore.CombinedOutput(); err != nil {
		t.Skipf("ipset restore: %v: %s (no ip_set in this kernel?)", err, out)
	}
	out, err := exec.Command("ipset", "save").Output()
	if err != nil {
		t.Fatal(err)
	}
	saved, err := ParseIPSetSave(string(out))
	if err != nil {
		t.Fatal(err)
	}
	read, err := ReadIPSets()
	if err != nil {
		t.Fatal(err)
	}
	if len(read) != len(saved) || len(read) != strings.Count(ipsetRestore, "create ") {
		t.Fatalf("read %d sets, ipset save has %d: %+v", len(read), len(saved), read)
	}
	for _, want := range saved {
		i := slices.IndexFunc(read, func(s IPSet) bool { return s.Name == want.Name })
		if i < 0 {
			t.Errorf("set %s not read", want.Name)
			continue
		}
		got := read[i]
		slices.Sort(got.Members)
		slices.Sort(want.Members)
		if got.Type != want.Type || !slices.Equal(got.Members, want.Members) {
			t.Errorf("set %s: read %s %q; ipset save says %s %q", want.Name, got.Type, got.Members, want.Type, want.Members)
		}
		if !strings.HasPrefix(want.Options, got.Options) {
			t.Errorf("set %s: options %q are not the start of ipset save's %q", want.Name, got.Options, want.Options)
		}
	}
}
