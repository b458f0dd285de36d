// Command etcd is etcd v3.6.8's server (the version kubeadm v1.36 deploys) for the offline kind node image: the
// same main as etcd's own (go.etcd.io/etcd/server/v3/etcdmain), from the module the project already requires for
// its in-process control plane. etcd's own main package lives in a module of its own (go.etcd.io/etcd/v3) with
// the etcdctl and etcdutl dependencies.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
