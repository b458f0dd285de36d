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
}

func main() {
	if len(os.Args) < 2 || os.Args[1] != "node" {
		fmt.Fprintln(os.Stderr, "usage: k8sguide-cilium node --node NAME --node-ip IP --object bpf_host.o --bpffs DIR --devices eth0,cni0 --kubeconfig FILE [--lb-algorithm random|maglev] [--nodeport-range 30000-32767]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("node", flag.ExitOnError)
	var o options
	var nodeIP, devices, npRange string
	fs.StringVar(&o.node, "node", "", "the node's name")
	fs.StringVar(&nodeIP, "node-ip", "", "the node's address on its external interface")
	fs.StringVar(&o.object, "object", "", "the compiled bpf_host.o for this node")
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
	o.devices = strings.Split(devices, ",")
	o.nodePortDev = o.devices[0]
	if _, err := fmt.Sscanf(npRange, "%d-%d", &o.nodePortRange[0], &o.nodePortRange[1]); err != nil {
		fail(fmt.Errorf("--nodeport-range %q: want MIN-MAX", npRange))
	}
	if o.lbAlgorithm != "random" && o.lbAlgorithm != "maglev" {
		fail(fmt.Errorf("--lb-algorithm %q: want random or maglev", o.lbAlgorithm))
	}
	if o.node == "" || o.object == "" || o.bpffs == "" || o.kubeconfig == "" {
		fail(errors.New("--node, --object, --bpffs and --kubeconfig are required"))
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
	return w.follow(ctx, cs)
}
