package nftables

import (
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
)

// The reply names the masquerade as nft prints it (masquerade fully-random); it used to say iptables'
// --random-fully.
func TestReplyNamesFullyRandom(t *testing.T) {
	_, walk := t2Worker(t)
	tr := walk("172.18.0.1:40002", "172.18.0.3:30696", netfilter.Origin{Iif: "eth0"})
	for _, p := range tr.Paths {
		if p.Reply == nil {
			t.Fatalf("path to %v has no reply", p.Endpoint)
		}
		if text := p.Reply.Text; !strings.Contains(text, "masquerade fully-random (port PORT' chosen at random)") || strings.Contains(text, "--random-fully") {
			t.Errorf("reply: %s", text)
		}
	}
}
