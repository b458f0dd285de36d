package node

import (
	"context"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	componentbaseconfig "k8s.io/component-base/config/v1alpha1"
	kubeproxyconfig "k8s.io/kube-proxy/config/v1alpha1"
	kubeproxyapp "k8s.io/kubernetes/cmd/kube-proxy/app"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/k8sguide/k8sguide/dataplanes/engines"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/netns"
	"github.com/k8sguide/k8sguide/lab/state"
)

// RunKubeProxy is `internal kube-proxy`: upstream kube-proxy's own command, with its own flags, in this process.
// It runs in a node's namespace (it removes other modes' rules at start-up, which must never happen to the
// host's), started by the node's agent.
//
// At SIGTERM (ctx done) it returns at once, and the process ends: upstream's proxy loop never returns, and
// upstream's kube-proxy, which handles no signal, dies at SIGTERM the same way. Waiting for it instead held
// every node's removal for the SIGKILL five seconds later (down: 15 s on a 3-node lab).
func RunKubeProxy(ctx context.Context, args []string) error {
	cmd := kubeproxyapp.NewProxyCommand()
	cmd.SetArgs(args)
	cmd.SilenceUsage = true
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return nil
	}
}

// kubeProxyConfiguration is the configuration kind gives kube-proxy, for the lab's dataplane. What kind leaves to
// kube-proxy's defaults stays unset here too (nodePortAddresses: upstream's default, which is "primary" for the
// nftables mode), except what would reach outside the node's namespace: the conntrack table size and TCP
// timeouts are host-wide sysctls (kind sets maxPerCore 0 for the same reason), and the OOM score is the
// process's own.
func kubeProxyConfiguration(cfg lab.Config, kubeconfig string, period time.Duration) *kubeproxyconfig.KubeProxyConfiguration {
	face, _ := engines.Lab(cfg.Dataplane)
	sync := metav1.Duration{Duration: period}
	minSync := metav1.Duration{Duration: netns.MinSyncPeriod}
	return &kubeproxyconfig.KubeProxyConfiguration{
		TypeMeta:          metav1.TypeMeta{APIVersion: "kubeproxy.config.k8s.io/v1alpha1", Kind: "KubeProxyConfiguration"},
		ClientConnection:  componentbaseconfig.ClientConnectionConfiguration{Kubeconfig: kubeconfig},
		Mode:              kubeproxyconfig.ProxyMode(face.KubeProxyMode),
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

// writeKubeProxyConfig writes the lab's KubeProxyConfiguration (kubeadm init's addon/kube-proxy phase writes it
// as a ConfigMap), pointing at the kube-proxy kubeconfig kubeadm's
// phase wrote (user system:kube-proxy, which the apiserver's bootstrap RBAC binds to system:node-proxier).
func writeKubeProxyConfig(store state.Store, st *state.Lab) error {
	period, err := netns.ResyncPeriod()
	if err != nil {
		return err
	}
	cp := netns.ControlPlaneConfig(store, st.Config, st.Nodes)
	data, err := yaml.Marshal(kubeProxyConfiguration(st.Config, cp.ProxyKubeconfig(), period))
	if err != nil {
		return err
	}
	return os.WriteFile(netns.KubeProxyConfigPath(store, st.Config.Name), data, 0o600)
}
