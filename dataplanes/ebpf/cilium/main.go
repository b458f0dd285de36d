package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"k8s.io/klog/v2"
)

// options are the flags of `k8sguide-cilium node`; the netns provider passes them all.
type options struct {
	node          string
	nodeIP        netip.Addr
	object        string
	bpffs         string
	devices       []string
	nodePortDev   string
	lbAlgorithm   string
	nodePortRange [2]uint16
	kubeconfig    string
	// The node's pod network: its pod CIDR, cilium_host's address (the pods' gateway), the bpf_lxc object
	// every pod endpoint loads, and the prefix of the pods' network namespaces (under /run/netns) before their
	// UID.
	podCIDR        netip.Prefix
	routerIP       netip.Addr
	lxcObject      string
	podNetnsPrefix string
	// The socket LB: the compiled bpf_sock.o, and the cgroup v2 directory it is attached to (every process of
	// the node runs in it).
	sockObject string
	cgroupRoot string
}

func main() {
	if len(os.Args) < 2 || os.Args[1] != "node" {
		fmt.Fprintln(os.Stderr, "usage: k8sguide-cilium node --node NAME --node-ip IP --object bpf_host.o --lxc-object bpf_lxc.o --pod-cidr CIDR --router-ip IP --pod-netns-prefix PREFIX --sock-object bpf_sock.o --cgroup-root DIR --bpffs DIR --devices eth0 --kubeconfig FILE [--lb-algorithm random|maglev] [--nodeport-range 30000-32767]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("node", flag.ExitOnError)
	var o options
	var nodeIP, devices, npRange, podCIDR, routerIP string
	fs.StringVar(&o.node, "node", "", "the node's name")
	fs.StringVar(&nodeIP, "node-ip", "", "the node's address on its external interface")
	fs.StringVar(&o.object, "object", "", "the compiled bpf_host.o for this node")
	fs.StringVar(&o.lxcObject, "lxc-object", "", "the compiled bpf_lxc.o for this node's pods")
	fs.StringVar(&podCIDR, "pod-cidr", "", "the node's pod CIDR")
	fs.StringVar(&routerIP, "router-ip", "", "cilium_host's address: the pods' gateway")
	fs.StringVar(&o.podNetnsPrefix, "pod-netns-prefix", "", "a pod's network namespace is this prefix and its UID")
	fs.StringVar(&o.sockObject, "sock-object", "", "the compiled bpf_sock.o for this node (the socket LB)")
	fs.StringVar(&o.cgroupRoot, "cgroup-root", "", "the cgroup v2 directory to attach the socket LB to: the node's processes run in it")
	fs.StringVar(&o.bpffs, "bpffs", "", "the node's directory on a bpf filesystem: maps in tc/globals, links in links/")
	fs.StringVar(&devices, "devices", "eth0", "interfaces to attach bpf_host to (the first is the NodePort device)")
	fs.StringVar(&o.lbAlgorithm, "lb-algorithm", "random", "random or maglev (--bpf-lb-algorithm)")
	fs.StringVar(&npRange, "nodeport-range", "30000-32767", "the NodePort range")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "the kubeconfig of the apiserver to watch Services, EndpointSlices and Nodes on")
	fs.Parse(os.Args[2:])
	var err error
	if o.nodeIP, err = netip.ParseAddr(nodeIP); err != nil || !o.nodeIP.Is4() {
		fail(fmt.Errorf("--node-ip %q: want an IPv4 address", nodeIP))
	}
	if o.podCIDR, err = netip.ParsePrefix(podCIDR); err != nil || !o.podCIDR.Addr().Is4() {
		fail(fmt.Errorf("--pod-cidr %q: want an IPv4 CIDR", podCIDR))
	}
	if o.routerIP, err = netip.ParseAddr(routerIP); err != nil || !o.podCIDR.Contains(o.routerIP) {
		fail(fmt.Errorf("--router-ip %q: want an address of the pod CIDR", routerIP))
	}
	o.devices = strings.Split(devices, ",")
	o.nodePortDev = o.devices[0]
	if _, err := fmt.Sscanf(npRange, "%d-%d", &o.nodePortRange[0], &o.nodePortRange[1]); err != nil {
		fail(fmt.Errorf("--nodeport-range %q: want MIN-MAX", npRange))
	}
	if o.lbAlgorithm != "random" && o.lbAlgorithm != "maglev" {
		fail(fmt.Errorf("--lb-algorithm %q: want random or maglev", o.lbAlgorithm))
	}
	if o.node == "" || o.object == "" || o.lxcObject == "" || o.sockObject == "" || o.cgroupRoot == "" || o.podNetnsPrefix == "" || o.bpffs == "" || o.kubeconfig == "" {
		fail(errors.New("--node, --object, --lxc-object, --sock-object, --cgroup-root, --pod-netns-prefix, --bpffs and --kubeconfig are required"))
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("node", o.node)
	// client-go logs through klog (a watch that failed, a relist): into the same log, in the same format.
	klog.SetSlogLogger(logger)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, logger, o); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "k8sguide-cilium:", err)
	os.Exit(1)
}

func run(ctx context.Context, logger *slog.Logger, o options) error {
	// The client first: a kubeconfig that cannot be read fails the agent before it attaches anything.
	cs, err := newClient(o.kubeconfig)
	if err != nil {
		return err
	}
	dp, err := load(logger, o)
	if err != nil {
		return err
	}
	defer dp.Close()
	logger.Info("datapath loaded", "object", o.object, "devices", o.devices, "lbAlgorithm", o.lbAlgorithm)
	w, err := newWriter(logger, dp, o)
	if err != nil {
		return err
	}
	eps, err := newEndpointManager(logger, dp, o)
	if err != nil {
		return err
	}
	// The endpoints and the load balancer are two controllers of the agent's, as in Cilium: either failing
	// ends the agent.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := eps.follow(ctx, cs); err != nil {
			cancel(err)
		}
	}()
	err = w.follow(ctx, cs)
	cancel(err)
	<-done
	if err == nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			err = cause
		}
	}
	return err
}
