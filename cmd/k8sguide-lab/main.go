// Command k8sguide-lab is what k8sguide runs rather than links: the programs a netns lab's namespaces run (every
// node's init and agent, kube-proxy, the control plane, the pod servers) and the built-in kubectl. The CLI starts
// it (`make build` puts it beside k8sguide); users do not call it. Apart, the CLI does not pay for initialising
// the apiserver, etcd, kube-proxy and kubectl on every command.
package main

import (
	"os"

	"github.com/k8sguide/k8sguide/cmd/k8sguide-lab/app"
)

func main() {
	os.Exit(app.Run(os.Args[1:]))
}
