// Command k8sguide-cilium is the Service proxy of an ebpf node in the netns lab: what the Cilium agent does for a
// kube-proxy-replacement NodePort datapath, with Cilium's own code where it is practical. It loads the node's
// compiled bpf_host object with Cilium's loader (pkg/bpf, with the load-time constants of pkg/datapath/config),
// attaches cil_from_netdev/cil_to_netdev with tcx, pins maps and links in the lab's private bpffs, and turns the
// lab's Services and EndpointSlices into Cilium's load-balancing map entries (pkg/loadbalancer/maps types,
// pkg/loadbalancer service flags, pkg/maglev lookup tables).
//
// It is a separate module so that Cilium's dependency graph never meets k8s.io/kubernetes's in the main module;
// it shares no Go code with it. It reads the lab's state as the Cilium agent does, from the lab's apiserver: it
// watches Services, EndpointSlices and Nodes with client-go's shared informers, as kube-proxy's user.
package main
