package netns

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	componentbaseconfig "k8s.io/component-base/config/v1alpha1"
	kubeproxyconfig "k8s.io/kube-proxy/config/v1alpha1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/state"
)

// Sync periods are kube-proxy's defaults (syncPeriod 30s, minSyncPeriod 1s), the first overridable.
const (
	syncPeriod    = 30 * time.Second
	minSyncPeriod = 1 * time.Second
)

// SyncPeriodEnv overrides kube-proxy's periodic full resync (a Go duration), for machines where a sync is slow:
// under emulation (the IPVS test VM) an ipvs proxier's resync, some 80 runs of ipset and iptables, takes seconds,
// and three nodes resyncing every 30 s keep the emulated CPUs busy. Changes are applied at once whatever the
// period.
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

// kubeProxyConfigPath is the lab's KubeProxyConfiguration, kind's kube-proxy ConfigMap as a file; every node
// reads the same one and names itself with --hostname-override, as kind's DaemonSet does.
func kubeProxyConfigPath(store state.Store, labName string) string {
	return filepath.Join(store.Dir(labName), "kube-proxy.yaml")
}

// kubeProxyConfiguration is the configuration kind gives kube-proxy, for the lab's dataplane. What kind leaves to
// kube-proxy's defaults stays unset here too (nodePortAddresses: upstream's default, which is "primary" for the
// nftables mode), except what would reach outside the node's namespace: the conntrack table size and TCP
// timeouts are host-wide sysctls (kind sets maxPerCore 0 for the same reason), and the OOM score is the
// process's own.
func kubeProxyConfiguration(cfg lab.Config, kubeconfig string, period time.Duration) *kubeproxyconfig.KubeProxyConfiguration {
	sync := metav1.Duration{Duration: period}
	minSync := metav1.Duration{Duration: minSyncPeriod}
	return &kubeproxyconfig.KubeProxyConfiguration{
		TypeMeta:          metav1.TypeMeta{APIVersion: "kubeproxy.config.k8s.io/v1alpha1", Kind: "KubeProxyConfiguration"},
		ClientConnection:  componentbaseconfig.ClientConnectionConfiguration{Kubeconfig: kubeconfig},
		Mode:              kubeproxyconfig.ProxyMode(cfg.Dataplane),
		ClusterCIDR:       lab.PodSubnet,
		NodePortAddresses: cfg.NodePortAddresses,
		IPTables:          kubeproxyconfig.KubeProxyIPTablesConfiguration{SyncPeriod: sync, MinSyncPeriod: minSync},
		NFTables:          kubeproxyconfig.KubeProxyNFTablesConfiguration{SyncPeriod: sync, MinSyncPeriod: minSync},
		IPVS:              kubeproxyconfig.KubeProxyIPVSConfiguration{SyncPeriod: sync, MinSyncPeriod: minSync},
		OOMScoreAdj:       ptr.To[int32](0),
		Conntrack: kubeproxyconfig.KubeProxyConntrackConfiguration{
			MaxPerCore:            ptr.To[int32](0),
			TCPEstablishedTimeout: &metav1.Duration{},
			TCPCloseWaitTimeout:   &metav1.Duration{},
		},
	}
}

// writeKubeProxyConfig writes the lab's KubeProxyConfiguration, pointing at the kube-proxy kubeconfig kubeadm's
// phase wrote (user system:kube-proxy, which the apiserver's bootstrap RBAC binds to system:node-proxier).
func writeKubeProxyConfig(store state.Store, st *state.Lab) error {
	period, err := resyncPeriod()
	if err != nil {
		return err
	}
	cp := ControlPlaneConfig(store, st.Config, st.Nodes)
	data, err := yaml.Marshal(kubeProxyConfiguration(st.Config, cp.ProxyKubeconfig(), period))
	if err != nil {
		return err
	}
	return os.WriteFile(kubeProxyConfigPath(store, st.Config.Name), data, 0o600)
}
