package netns

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/k8sguide/k8sguide/lab/state"
)

// Sync periods are kube-proxy's defaults (syncPeriod 30s, minSyncPeriod 1s), the first overridable
// (SyncPeriodEnv).
const (
	syncPeriod    = 30 * time.Second
	MinSyncPeriod = 1 * time.Second
)

// SyncPeriodEnv overrides kube-proxy's periodic full resync (a Go duration), for machines where a sync is slow:
// under emulation (the IPVS test VM) an ipvs proxier's resync, some 80 runs of ipset and iptables, takes seconds,
// and three nodes resyncing every 30 s keep the emulated CPUs busy. Changes are applied at once whatever the
// period.
const SyncPeriodEnv = "K8SGUIDE_PROXY_SYNC_PERIOD"

// ResyncPeriod is kube-proxy's syncPeriod for the lab: $K8SGUIDE_PROXY_SYNC_PERIOD, else kube-proxy's default.
// `up` checks it before anything is made; the lab's kube-proxy configuration holds it.
func ResyncPeriod() (time.Duration, error) {
	v := os.Getenv(SyncPeriodEnv)
	if v == "" {
		return syncPeriod, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < MinSyncPeriod {
		return 0, fmt.Errorf("$%s=%q: want a duration of at least %s", SyncPeriodEnv, v, MinSyncPeriod)
	}
	return d, nil
}

// KubeProxyConfigPath is the lab's KubeProxyConfiguration, kind's kube-proxy ConfigMap as a file; every node
// reads the same one and names itself with --hostname-override, as kind's DaemonSet does.
func KubeProxyConfigPath(store state.Store, labName string) string {
	return filepath.Join(store.Dir(labName), "kube-proxy.yaml")
}
