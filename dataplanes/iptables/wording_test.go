package iptables

import (
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
)

// A condition that takes no value (-m recent --rcheck) is quoted without a trailing space: the reason used to
// read "(rule wants --rcheck )".
func TestReasonOfAConditionWithoutValue(t *testing.T) {
	r, err := ParseSave(`*filter
:INPUT ACCEPT [0:0]
-A INPUT -p tcp -m recent --rcheck --seconds 60 --name guard -j DROP
COMMIT
`)
	if err != nil {
		t.Fatal(err)
	}
	paths := walk(t, r, workerNet(t), "172.18.0.1", "172.18.0.3:22", netfilter.Origin{Iif: "eth0"})
	var reasons []string
	for _, h := range paths[0].Hops {
		if !h.Matched && h.Reason != "" {
			reasons = append(reasons, h.Reason)
		}
	}
	all := strings.Join(reasons, "\n")
	if !strings.Contains(all, "(rule wants --rcheck)") {
		t.Errorf("the miss does not quote --rcheck as the rule has it:\n%s", all)
	}
}

// The reply says how the masquerading rule picks the port in the rule's own words: iptables' --random-fully.
func TestReplyNamesRandomFully(t *testing.T) {
	r, err := ParseSave(readFile(t, "iptables-worker.save"))
	if err != nil {
		t.Fatal(err)
	}
	paths := walk(t, r, workerNet(t), "172.18.0.1", "172.18.0.3:31103", netfilter.Origin{Iif: "eth0"})
	if len(paths) == 0 || paths[0].Reply == nil {
		t.Fatal("no reply")
	}
	if text := paths[0].Reply.Text; !strings.Contains(text, "MASQUERADE --random-fully (port PORT' chosen at random)") {
		t.Errorf("reply: %s", text)
	}
}
