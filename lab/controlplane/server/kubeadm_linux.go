package server

import (
	"bytes"
	"fmt"
	"github.com/k8sguide/k8sguide/lab/controlplane"
	"os"
	"path/filepath"
	"time"

	kubeadmapi "k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm"
	kubeadmconstants "k8s.io/kubernetes/cmd/kubeadm/app/constants"
	certsphase "k8s.io/kubernetes/cmd/kubeadm/app/phases/certs"
	controlplanephase "k8s.io/kubernetes/cmd/kubeadm/app/phases/controlplane"
	kubeconfigphase "k8s.io/kubernetes/cmd/kubeadm/app/phases/kubeconfig"
	configutil "k8s.io/kubernetes/cmd/kubeadm/app/util/config"
)

// etcdURL is the embedded etcd's client address: the control-plane node's loopback, in its own namespace. kind's
// etcd speaks TLS there; this one speaks plain HTTP, as nothing but the apiserver in the same process can reach it.
const (
	etcdURL     = "http://127.0.0.1:2379"
	etcdPeerURL = "http://127.0.0.1:2380"
)

// kubeadm is the InitConfiguration `kubeadm init` would get from kind for this lab, with the differences a
// one-process control plane needs: an external (embedded, plain-HTTP) etcd, files under Dir instead of
// /etc/kubernetes, and the start-up costs turned off (see the ExtraArgs).
func kubeadmConfig(c controlplane.Config) (*kubeadmapi.InitConfiguration, error) {
	cfg, err := configutil.DefaultedStaticInitConfiguration()
	if err != nil {
		return nil, err
	}
	cfg.KubernetesVersion = controlplane.KubernetesVersion
	cfg.ClusterName = c.ClusterName
	cfg.CertificatesDir = c.PKIDir()
	// ECDSA keys, as kubeadm offers (encryptionAlgorithm: ECDSA-P256): a dozen RSA-2048 keys cost about a second
	// of `up` on two cores.
	cfg.EncryptionAlgorithm = kubeadmapi.EncryptionAlgorithmECDSAP256
	cfg.LocalAPIEndpoint = kubeadmapi.APIEndpoint{AdvertiseAddress: c.AdvertiseAddress, BindPort: controlplane.Port}
	cfg.ControlPlaneEndpoint = fmt.Sprintf("%s:%d", c.AdvertiseAddress, controlplane.Port)
	cfg.NodeRegistration.Name = c.NodeName
	cfg.Networking.ServiceSubnet = c.ServiceSubnet
	cfg.Networking.PodSubnet = c.PodSubnet
	// kind adds these, so that its kubeconfig can point at a loopback port of the host.
	cfg.APIServer.CertSANs = []string{"localhost", "127.0.0.1"}
	cfg.Etcd = kubeadmapi.Etcd{External: &kubeadmapi.ExternalEtcd{Endpoints: []string{etcdURL}}}
	cfg.APIServer.ExtraArgs = []kubeadmapi.Arg{
		{Name: "service-node-port-range", Value: c.NodePortRange},
		// The control plane is restarted in place when it dies; a graceful shutdown would hold the port for
		// seconds the lab's nodes spend refused.
		{Name: "shutdown-delay-duration", Value: "0s"},
	}
	cfg.ControllerManager.ExtraArgs = append(kubeconfigArgs(c.ControllerManagerKubeconfig()),
		// One replica: without leader election a restarted controller-manager starts at once instead of
		// waiting out its predecessor's lease (15 s).
		kubeadmapi.Arg{Name: "leader-elect", Value: "false"},
		// kubeadm also enables the bootstrap-token controllers; a netns lab joins nodes by certificate.
		kubeadmapi.Arg{Name: "controllers", Value: "*"},
		// With kubeadm's true, every controller first waits for its own ServiceAccount and token: about five
		// seconds of every start. The controllers run with the controller-manager's own certificate instead,
		// which bindControllerRoles gives exactly the controllers' roles.
		kubeadmapi.Arg{Name: "use-service-account-credentials", Value: "false"},
		// Upstream's 20 requests a second (burst 30) spare an apiserver other clients share; here it paces
		// the EndpointSlice controller to 20 Services a second, so a deploy of 1,000 Services waited 50 s for
		// their slices. The lab's apiserver has no one else to spare.
		kubeadmapi.Arg{Name: "kube-api-qps", Value: "200"},
		kubeadmapi.Arg{Name: "kube-api-burst", Value: "400"},
	)
	cfg.Scheduler.ExtraArgs = append(kubeconfigArgs(c.SchedulerKubeconfig()),
		kubeadmapi.Arg{Name: "leader-elect", Value: "false"})
	return cfg, nil
}

// kubeconfigArgs point a component's three kubeconfig flags, which kubeadm sets to /etc/kubernetes/NAME.conf,
// at the lab's file.
func kubeconfigArgs(path string) []kubeadmapi.Arg {
	return []kubeadmapi.Arg{
		{Name: "kubeconfig", Value: path},
		{Name: "authentication-kubeconfig", Value: path},
		{Name: "authorization-kubeconfig", Value: path},
	}
}

// Commands are the command lines of kube-apiserver, kube-controller-manager and kube-scheduler, as kubeadm writes
// them into kind's static pod manifests (argv[0] is the component's name).
func Commands(c controlplane.Config) (apiserver, controllerManager, scheduler []string, err error) {
	cfg, err := kubeadmConfig(c)
	if err != nil {
		return nil, nil, nil, err
	}
	pods := controlplanephase.GetStaticPodSpecs(&cfg.ClusterConfiguration, &cfg.LocalAPIEndpoint, []kubeadmapi.EnvVar{})
	command := func(name string) []string { return pods[name].Spec.Containers[0].Command }
	return command(kubeadmconstants.KubeAPIServer), command(kubeadmconstants.KubeControllerManager), command(kubeadmconstants.KubeScheduler), nil
}

// WritePKI runs kubeadm's certs and kubeconfig phases for the lab: the cluster CA, the apiserver's serving
// certificate (SANs: the kubernetes Service names and ClusterIP, the node's name and address, localhost), the
// front-proxy CA, the service-account keys, admin.conf, super-admin.conf, the controller-manager's and the
// scheduler's kubeconfigs, a kubelet.conf per node and kube-proxy's kubeconfig. kubeadm reports each file on
// stdout.
func WritePKI(c controlplane.Config, nodes []string) error {
	cfg, err := kubeadmConfig(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return err
	}
	if err := certsphase.CreatePKIAssets(cfg); err != nil {
		return err
	}
	if err := kubeconfigphase.CreateJoinControlPlaneKubeConfigFiles(c.Dir, cfg); err != nil {
		return err
	}
	if err := kubeconfigphase.CreateKubeConfigFile(kubeadmconstants.SuperAdminKubeConfigFileName, c.Dir, cfg); err != nil {
		return err
	}
	notAfter := time.Now().Add(kubeadmconstants.CertificateValidityPeriod)
	write := func(path, user string, groups []string) error {
		var buf bytes.Buffer
		if err := kubeconfigphase.WriteKubeConfigWithClientCert(&buf, cfg, user, groups, notAfter); err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(path), err)
		}
		return os.WriteFile(path, buf.Bytes(), 0o600)
	}
	for _, n := range nodes {
		if err := write(c.NodeKubeconfig(n), kubeadmconstants.NodesUserPrefix+n, []string{kubeadmconstants.NodesGroup}); err != nil {
			return err
		}
	}
	return write(c.ProxyKubeconfig(), "system:kube-proxy", nil)
}
