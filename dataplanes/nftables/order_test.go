package nftables

import (
	"regexp"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// kindNAT is `nft -a list ruleset` on a kind node in nftables mode, cut to the nat chains that matter: kind's
// entrypoint made iptables-nft's nat table at boot (handle 2), kube-proxy its own table later (handle 9). Both
// translate the NodePort here (kind's rule is made up, to tell the two apart).
const kindNAT = `table ip nat { # handle 2
	chain PREROUTING { # handle 1
		type nat hook prerouting priority dstnat; policy accept;
		tcp dport 30080 counter packets 0 bytes 0 dnat to 10.244.9.9:80 # handle 12
	}
}
table ip kube-proxy { # handle 9
	chain nat-prerouting { # handle 3
		type nat hook prerouting priority dstnat; policy accept;
		tcp dport 30080 dnat to 10.244.1.5:80 # handle 20
	}
}
`

// The kernel runs the later-made table's nat chain first (equal priority), and the nat binding it makes skips
// the other: kube-proxy's endpoint, and no hop of iptables-nft's chain.
func TestHandlesOrderEqualPriorityChains(t *testing.T) {
	tr, _ := traceDump(t, kindNAT, "172.18.0.1:40000", "172.18.0.3:30080", "tcp", false, "172.18.0.3")
	if tr.Verdict != trace.Delivered || len(tr.Endpoints) != 1 || tr.Endpoints[0].Addr() != "10.244.1.5:80" {
		t.Fatalf("want kube-proxy's endpoint:\n%s", dump(tr))
	}
	for _, h := range tr.Paths[0].Hops {
		if h.Table == "ip nat" {
			t.Errorf("iptables-nft's nat chain runs after kube-proxy's translated: %+v", h)
		}
	}
	// The same listing without handles (`nft list ruleset`): which chain translates is not known.
	noHandles := regexp.MustCompile(` # handle \d+`).ReplaceAllString(kindNAT, "")
	tr, _ = traceDump(t, noHandles, "172.18.0.1:40000", "172.18.0.3:30080", "tcp", false, "172.18.0.3")
	m := strings.Join(tr.Missing, "\n")
	if tr.Verdict != trace.Unknown || !strings.Contains(m, "ip nat/PREROUTING and ip kube-proxy/nat-prerouting") || !strings.Contains(m, "nft -a list ruleset") {
		t.Errorf("without handles: verdict %s, missing %q\n%s", tr.Verdict, m, dump(tr))
	}
}
