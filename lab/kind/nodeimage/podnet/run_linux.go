package podnet

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/coreos/go-iptables/iptables"
	"github.com/vishvananda/netlink"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// routeProtocol marks the routes this program adds, so that a node that left has its route removed and nobody
// else's route is touched ("k" for k8sguide; the kernel keeps protocols above 4 for daemons like this one).
const routeProtocol = netlink.RouteProtocol(107)

// Options are what the DaemonSet gives the program (kindnetd's environment).
type Options struct {
	HostIP     string   // this node's address (downward API: status.hostIP)
	PodSubnets []string // the cluster's pod subnet (kind templates it into the manifest)
	// Resync is how often everything is checked again even without a change (kindnetd: 10 s routes, 60 s rules).
	Resync time.Duration
}

// Run keeps the node's CNI configuration, routes and masquerade rules in line with the cluster's Nodes until ctx
// ends.
func Run(ctx context.Context, cs kubernetes.Interface, o Options) error {
	if net.ParseIP(o.HostIP) == nil {
		return fmt.Errorf("HOST_IP %q is not an address", o.HostIP)
	}
	if len(o.PodSubnets) == 0 {
		return fmt.Errorf("no pod subnet (POD_SUBNET)")
	}
	ipt, err := iptables.NewWithProtocol(iptables.ProtocolIPv4)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(cs, o.Resync)
	nodes := factory.Core().V1().Nodes()
	changed := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    poke,
		UpdateFunc: func(_, n any) { poke(n) },
		DeleteFunc: poke,
	})
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), nodes.Informer().HasSynced) {
		return ctx.Err()
	}
	mtu := 0
	if l, err := netlink.LinkByName("eth0"); err == nil {
		mtu = l.Attrs().MTU
	}
	tick := time.NewTicker(o.Resync)
	defer tick.Stop()
	for {
		list, err := nodes.Lister().List(labels.Everything())
		if err != nil {
			return err
		}
		all := make([]v1.Node, len(list))
		for i, n := range list {
			all[i] = *n
		}
		if err := reconcile(ipt, PlanFor(all, o.HostIP), o.PodSubnets, mtu); err != nil {
			log.Printf("reconcile: %v (again in %s)", err, o.Resync)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-tick.C:
		}
	}
}

func reconcile(ipt *iptables.IPTables, p Plan, podSubnets []string, mtu int) error {
	var errs []string
	if p.PodCIDR != "" {
		conf, err := CNIConfig(p.PodCIDR, mtu)
		if err == nil {
			var changed bool
			if changed, err = WriteConfig(ConfigFile, conf); changed && err == nil {
				log.Printf("wrote %s for pod CIDR %s", ConfigFile, p.PodCIDR)
			}
		}
		if err != nil {
			errs = append(errs, err.Error())
		}
	}
	if err := syncRoutes(p.Routes); err != nil {
		errs = append(errs, err.Error())
	}
	if err := syncMasq(ipt, podSubnets); err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// syncRoutes makes this node's routes to other nodes' pod CIDRs those of the plan, removing ones it added for
// nodes that are gone.
func syncRoutes(want []Route) error {
	have, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: routeProtocol}, netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return fmt.Errorf("listing routes: %w", err)
	}
	wanted := map[netip.Prefix]bool{}
	for _, r := range want {
		wanted[r.CIDR] = true
		dst := &net.IPNet{IP: r.CIDR.Addr().AsSlice(), Mask: net.CIDRMask(r.CIDR.Bits(), 32)}
		route := &netlink.Route{Dst: dst, Gw: r.Via.AsSlice(), Protocol: routeProtocol}
		if err := netlink.RouteReplace(route); err != nil {
			return fmt.Errorf("route %s via %s (node %s): %w", r.CIDR, r.Via, r.Node, err)
		}
	}
	for _, r := range have {
		if r.Dst == nil {
			continue
		}
		ones, _ := r.Dst.Mask.Size()
		addr, ok := netip.AddrFromSlice(r.Dst.IP.To4())
		if ok && !wanted[netip.PrefixFrom(addr, ones)] {
			if err := netlink.RouteDel(&r); err != nil {
				return fmt.Errorf("removing route %s: %w", r.Dst, err)
			}
		}
	}
	return nil
}

// syncMasq makes MasqChain hold exactly the masquerade rules, and POSTROUTING send to it.
func syncMasq(ipt *iptables.IPTables, podSubnets []string) error {
	chain, postrouting := MasqRules(podSubnets)
	exists, err := ipt.ChainExists("nat", MasqChain)
	if err != nil {
		return err
	}
	if !exists {
		if err := ipt.NewChain("nat", MasqChain); err != nil {
			return err
		}
	}
	whole := true
	if rules, err := ipt.List("nat", MasqChain); err != nil || len(rules) != len(chain)+1 {
		whole = false // the chain's -N line and one per rule
	} else {
		for _, r := range chain {
			if ok, err := ipt.Exists("nat", MasqChain, r...); err != nil || !ok {
				whole = false
				break
			}
		}
	}
	if !whole {
		if err := ipt.ClearChain("nat", MasqChain); err != nil {
			return err
		}
		for _, r := range chain {
			if err := ipt.Append("nat", MasqChain, r...); err != nil {
				return err
			}
		}
	}
	return ipt.AppendUnique("nat", "POSTROUTING", postrouting...)
}
