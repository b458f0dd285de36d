package kerneltrace_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/inspect/kerneltrace"
)

// monitorLines is `nft monitor trace` (nftables v1.0.6, kernel 6.18) as it printed, in TestRewrittenChain, a
// SYN whose chain svc was flushed and refilled after the monitor started; the line of trace id 0badf00d was
// added by hand, as another flow's packet traced in the same namespace at the same time.
const monitorLines = `trace id cf421d4f ip k8sguide-trace-41001 ready policy accept 
trace id 7ade61c2 ip k8sguide-trace-41001 out packet: oif "lo" ip saddr 127.0.0.1 ip daddr 127.0.0.5 ip dscp cs0 ip ecn not-ect ip ttl 64 ip id 54442 ip length 60 tcp sport 41001 tcp dport 80 tcp flags == syn tcp window 65495 
trace id 7ade61c2 ip k8sguide-trace-41001 out rule ip daddr 127.0.0.5 tcp sport 41001 tcp dport 80 meta nftrace set 1 (verdict continue)
trace id 7ade61c2 ip k8sguide-trace-41001 out policy accept 
trace id 7ade61c2 ip t out packet: oif "lo" ip saddr 127.0.0.1 ip daddr 127.0.0.5 ip dscp cs0 ip ecn not-ect ip ttl 64 ip id 54442 ip length 60 tcp sport 41001 tcp dport 80 tcp flags == syn tcp window 65495 
trace id 7ade61c2 ip t out rule ip daddr 127.0.0.5 jump svc (verdict jump svc)
trace id 0badf00d ip t svc unknown rule handle 9 (verdict continue)
trace id 7ade61c2 ip t svc unknown rule handle 6 (verdict continue)
trace id 7ade61c2 ip t out policy accept 
trace id 22040c50 ip k8sguide-trace-41001 pre packet: iif "lo" @ll,0,112 0x800 ip saddr 127.0.0.1 ip daddr 127.0.0.5 ip dscp cs0 ip ecn not-ect ip ttl 64 ip id 54442 ip length 60 tcp sport 41001 tcp dport 80 tcp flags == syn tcp window 65495 
trace id 22040c50 ip k8sguide-trace-41001 pre rule ip daddr 127.0.0.5 tcp sport 41001 tcp dport 80 meta nftrace set 1 (verdict continue)
trace id 22040c50 ip k8sguide-trace-41001 pre policy accept 
trace id 824e2f00 ip k8sguide-trace-41001 ready policy accept `

// chainListing is `nft -a list chain ip t svc` after that rewrite, as nft prints it.
const chainListing = "table ip t {\n\tchain svc { # handle 2\n" +
	"\t\tip daddr 127.0.0.5 tcp dport 80 counter packets 1 bytes 60 comment \"rewritten\" # handle 6\n\t}\n}\n"

var flow = trace.Flow{Dst: netip.MustParseAddr("127.0.0.5"), Proto: "tcp", Sport: 41001, Dport: 80}

func TestResolveUnknownRules(t *testing.T) {
	lines := strings.Split(monitorLines, "\n")
	var listed []string
	list := func(family, table, chain string) (string, error) {
		listed = append(listed, family+" "+table+" "+chain)
		return chainListing, nil
	}
	got, err := kerneltrace.ResolveUnknownRules(lines, flow, list)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(listed) != "[ip t svc]" {
		t.Errorf("listed %v, want the one chain of our flow's unknown rule, once", listed)
	}
	want := `trace id 7ade61c2 ip t svc rule ip daddr 127.0.0.5 tcp dport 80 counter packets 1 bytes 60 comment "rewritten" (verdict continue)`
	if got[7] != want {
		t.Errorf("resolved line:\n got %s\nwant %s", got[7], want)
	}
	if got[6] != lines[6] {
		t.Errorf("another flow's line changed: %s", got[6])
	}
	events := kerneltrace.ParseNft(got, flow)
	if len(events) != 3 || events[1].Chain != "svc" || events[1].Text != `ip daddr 127.0.0.5 tcp dport 80 comment "rewritten"` || events[1].Verdict != "continue" {
		t.Errorf("events %+v, want the svc rule's event with its text", events)
	}
}

func TestUnresolvableRuleIsIncompleteAndStaysVisible(t *testing.T) {
	lines := strings.Split(monitorLines, "\n")
	gone := func(family, table, chain string) (string, error) {
		return "table ip t {\n\tchain svc { # handle 2\n\t}\n}\n", nil // flushed again
	}
	got, err := kerneltrace.ResolveUnknownRules(lines, flow, gone)
	if err == nil || !strings.HasPrefix(err.Error(), kerneltrace.Incomplete) || !strings.Contains(err.Error(), "rule handle 6 of chain ip t svc") {
		t.Fatalf("err = %v, want %q naming handle 6 of ip t svc", err, kerneltrace.Incomplete)
	}
	events := kerneltrace.ParseNft(got, flow)
	if len(events) != 3 || events[1].Text != "unknown rule handle 6" {
		t.Errorf("events %+v: the unresolved rule's event must stay, named by its handle", events)
	}
}
