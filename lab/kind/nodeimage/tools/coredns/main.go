// Command coredns is CoreDNS v1.14.2 (the version kubeadm v1.36 deploys) for the offline kind node image, with
// the plugins of kubeadm's Corefile and log compiled in: CoreDNS's own main (coremain) and plugins, at the
// versions of its own go.mod, as a custom build its plugin.cfg describes. The other plugins (cloud DNS
// providers, dnstap, ...) are left out: their SDKs are most of CoreDNS's build and a lab's Corefile names none.
// A nested module, so that CoreDNS's dependencies stay at its own versions and out of the main module.
package main

import (
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"

	"github.com/coredns/coredns/coremain"
)

func main() { coremain.Run() }
