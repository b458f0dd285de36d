package netns

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/proxy/healthcheck"

	"github.com/k8sguide/k8sguide/dataplanes/kubeproxy"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/state"
)

// Sync periods are kube-proxy's defaults (--iptables-sync-period / --nftables-sync-period / --ipvs-sync-period
// 30s, --*-min-sync-period 1s).
const (
	syncPeriod    = 30 * time.Second
	minSyncPeriod = 1 * time.Second
	pollInterval  = 50 * time.Millisecond
)

// SyncPeriodEnv overrides the periodic full resync of the node proxies (a Go duration), for machines where a
// sync is slow: under emulation (the IPVS test VM) an ipvs proxier's resync, some 80 runs of ipset and
// iptables, takes seconds, and three nodes resyncing every 30 s keep the emulated CPUs busy. Changes to the lab
// are applied at once whatever the period.
const SyncPeriodEnv = "K8SGUIDE_PROXY_SYNC_PERIOD"

func resyncPeriod() (time.Duration, error) {
	v := os.Getenv(SyncPeriodEnv)
	if v == "" {
		return syncPeriod, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < minSyncPeriod {
		return 0, fmt.Errorf("$%s=%q: want a duration of at least %s", SyncPeriodEnv, v, minSyncPeriod)
	}
	return d, nil
}

// nodeSource hands the health server its Node, which kube-proxy would read from the apiserver.
type nodeSource struct{ node *v1.Node }

func (n nodeSource) Node() *v1.Node { return n.node }

// RunNodeProxy is the process a node runs as its Service proxy (started inside the node's namespace by Create):
// it builds the lab's dataplane proxier, hands it the lab's Services and EndpointSlices whenever the lab's state
// changes, and reports each generation it has put into the kernel. It returns when ctx ends or the lab is gone.
func RunNodeProxy(ctx context.Context, store state.Store, labName, nodeName string) error {
	st, node, err := readNode(store, labName, nodeName)
	if err != nil {
		return err
	}
	period, err := resyncPeriod()
	if err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("node", nodeName)
	labels := map[string]string{v1.LabelHostname: nodeName, v1.LabelOSStable: "linux"}
	k8sNode := &v1.Node{}
	k8sNode.Name, k8sNode.Labels = nodeName, labels
	cfg := kubeproxy.NodeConfig{
		NodeName:          nodeName,
		NodeIP:            net.ParseIP(node.IP),
		ClusterCIDR:       lab.PodSubnet,
		NodePortAddresses: st.Config.NodePortAddresses,
		SyncPeriod:        period,
		MinSyncPeriod:     minSyncPeriod,
		Health:            healthcheck.NewProxyHealthServer("", 0, nodeSource{k8sNode}),
		Logger:            logger,
	}
	proxy, err := kubeproxy.New(ctx, st.Config.Dataplane, cfg, labels)
	if err != nil {
		return fmt.Errorf("kube-proxy (%s) on %s: %w", st.Config.Dataplane, nodeName, err)
	}
	logger.Info("kube-proxy started", "dataplane", st.Config.Dataplane, "nodeIP", node.IP, "nodePortAddresses", st.Config.NodePortAddresses)

	dir := store.Dir(labName)
	statePath := store.StatePath(labName)
	var seen os.FileInfo
	applied := int64(-1)
	for {
		if st.Generation != applied {
			start := time.Now()
			proxy.Apply(st.Services, st.EndpointSlices)
			took := time.Since(start)
			if applied < 0 {
				go proxy.Run()
			}
			applied = st.Generation
			if err := writeApplied(dir, nodeName, applied, took); err != nil {
				return err
			}
			logger.Info("applied", "generation", applied, "services", len(st.Services), "endpointSlices", len(st.EndpointSlices), "sync", took)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pollInterval):
		}
		// Saves are atomic renames, so new state is a new file; inode numbers can be reused, so the modification
		// time and size are compared too. Only a changed file is read and decoded.
		fi, err := os.Stat(statePath)
		if err != nil {
			if _, serr := os.Stat(dir); serr != nil {
				return nil // the lab was removed: nothing left to proxy for
			}
			continue
		}
		if seen != nil && os.SameFile(fi, seen) && fi.ModTime().Equal(seen.ModTime()) && fi.Size() == seen.Size() {
			continue
		}
		next, err := store.Read(labName)
		if err != nil {
			logger.Error(err, "reading lab state")
			continue
		}
		st, seen = next, fi
	}
}

// readNode reads the lab's state for a process of one of its nodes, and that node.
func readNode(store state.Store, labName, nodeName string) (*state.Lab, lab.Node, error) {
	st, err := store.Read(labName)
	if err != nil {
		return nil, lab.Node{}, err
	}
	node, ok := st.Node(nodeName)
	if !ok {
		return nil, lab.Node{}, &lab.NotFoundError{Kind: "node", Name: nodeName}
	}
	return st, node, nil
}

// writeApplied reports a generation as applied, with how long the proxier's sync of it took.
func writeApplied(dir, node string, generation int64, sync time.Duration) error {
	path := appliedPath(dir, node)
	if err := os.WriteFile(path+".tmp", []byte(fmt.Sprintf("%d %d\n", generation, sync.Nanoseconds())), 0o600); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}
