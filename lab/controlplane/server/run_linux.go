package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"github.com/k8sguide/k8sguide/lab/controlplane"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	kubeadmconstants "k8s.io/kubernetes/cmd/kubeadm/app/constants"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/apiserver/pkg/server/flagz"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	restclient "k8s.io/client-go/rest"
	basecompatibility "k8s.io/component-base/compatibility"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	apiserverapp "k8s.io/kubernetes/cmd/kube-apiserver/app"
	apiserveroptions "k8s.io/kubernetes/cmd/kube-apiserver/app/options"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kcmoptions "k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
	schedulerapp "k8s.io/kubernetes/cmd/kube-scheduler/app"
	scheduleroptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
)

// Run runs the lab's control plane until ctx ends or a component fails: etcd first, then the apiserver, and once
// it is ready the controller-manager and the scheduler, each from the command line kubeadm writes for it. The
// process is the unit of stopping (the controller-manager and the scheduler do not all honour ctx), so the caller
// exits when Run returns, and whoever supervises the process starts it again.
func Run(ctx context.Context, c controlplane.Config) error {
	// The three components each apply the process-wide logging configuration, the same one.
	logsapi.ReapplyHandling = logsapi.ReapplyHandlingIgnoreUnchanged
	// Their own clients would warn about the deprecated APIs they watch on purpose.
	restclient.SetDefaultWarningHandler(restclient.NoWarnings{})

	apiserver, controllerManager, scheduler, err := Commands(c)
	if err != nil {
		return err
	}
	etcd, err := startEtcd(c)
	if err != nil {
		return err
	}
	defer etcd.Close()

	failed := make(chan error, 4)
	go func() { failed <- fmt.Errorf("etcd: %w", <-etcd.Err()) }()
	go func() { failed <- component("kube-apiserver", runAPIServer(ctx, apiserver[1:])) }()
	if err := waitReady(ctx, c, failed); err != nil {
		return err
	}
	klog.InfoS("kube-apiserver is ready", "address", c.Server())
	if err := bindControllerRoles(ctx, c); err != nil {
		return err
	}
	go func() {
		failed <- component("kube-controller-manager", runControllerManager(ctx, controllerManager[1:]))
	}()
	go func() { failed <- component("kube-scheduler", runScheduler(ctx, scheduler[1:])) }()
	select {
	case err := <-failed:
		return err
	case <-ctx.Done():
		return nil
	}
}

func component(name string, err error) error {
	if err == nil {
		err = errors.New("stopped")
	}
	return fmt.Errorf("%s: %w", name, err)
}

// startEtcd starts a single-member etcd on the node's loopback with its data under Dir, so a restarted control
// plane finds the cluster as it was. The lab lives on tmpfs or throwaway disk: fsync buys nothing there and costs
// start-up time (etcd's own UnsafeNoFsync).
func startEtcd(c controlplane.Config) (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = c.NodeName
	cfg.Dir = c.EtcdDir()
	client, _ := url.Parse(etcdURL)
	peer, _ := url.Parse(etcdPeerURL)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "error" // its warnings are about slow requests, of which a busy two-core machine has many
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case <-time.After(time.Minute):
		e.Close()
		return nil, errors.New("etcd: not ready after a minute")
	}
}

// waitReady waits until the apiserver answers /readyz on the node's address.
func waitReady(ctx context.Context, c controlplane.Config, failed <-chan error) error {
	ca, err := os.ReadFile(c.PKIDir() + "/ca.crt")
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	for {
		// /readyz is open to anyone (system:public-info-viewer).
		if resp, err := client.Get(c.Server() + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-failed:
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func parse(name string, sets map[string]*pflag.FlagSet, args []string) error {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	for _, s := range sets {
		fs.AddFlagSet(s)
	}
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%s flags: %w", name, err)
	}
	return nil
}

// runAPIServer is kube-apiserver's command without its signal handler (one per process, and this process has
// its own).
func runAPIServer(ctx context.Context, args []string) error {
	s := apiserveroptions.NewServerRunOptions()
	named := s.Flags()
	s.Flagz = flagz.NamedFlagSetsReader{FlagSets: named}
	if err := parse("kube-apiserver", named.FlagSets, args); err != nil {
		return err
	}
	if err := s.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
		return err
	}
	if err := logsapi.ValidateAndApply(s.Logs, s.GenericServerRunOptions.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)); err != nil {
		return err
	}
	completed, err := s.Complete(ctx)
	if err != nil {
		return err
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return errors.Join(errs...)
	}
	return apiserverapp.Run(ctx, completed)
}

// runControllerManager is kube-controller-manager's command, as its RunE runs it.
func runControllerManager(ctx context.Context, args []string) error {
	s, err := kcmoptions.NewKubeControllerManagerOptions()
	if err != nil {
		return err
	}
	named := s.Flags(kcmapp.KnownControllers(), kcmapp.ControllersDisabledByDefault(), kcmapp.ControllerAliases())
	s.ParsedFlags = &named
	if err := parse("kube-controller-manager", named.FlagSets, args); err != nil {
		return err
	}
	if err := s.ComponentGlobalsRegistry.Set(); err != nil {
		return err
	}
	if err := logsapi.ValidateAndApply(s.Logs, utilfeature.DefaultFeatureGate); err != nil {
		return err
	}
	cfg, err := s.Config(ctx, kcmapp.KnownControllers(), kcmapp.ControllersDisabledByDefault(), kcmapp.ControllerAliases())
	if err != nil {
		return err
	}
	return kcmapp.Run(ctx, cfg.Complete())
}

// runScheduler is kube-scheduler's command without its signal handler.
func runScheduler(ctx context.Context, args []string) error {
	opts := scheduleroptions.NewOptions()
	if err := parse("kube-scheduler", opts.Flags.FlagSets, args); err != nil {
		return err
	}
	if err := opts.ComponentGlobalsRegistry.Set(); err != nil {
		return err
	}
	if err := logsapi.ValidateAndApply(opts.Logs, opts.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)); err != nil {
		return err
	}
	cc, sched, err := schedulerapp.Setup(ctx, opts)
	if err != nil {
		return err
	}
	return schedulerapp.Run(ctx, cc, sched)
}

// bindControllerRoles binds each of the bootstrap policy's controller roles (system:controller:*) to the
// controller-manager's own user, which runs every controller (use-service-account-credentials=false): the same
// rights as the per-controller ServiceAccounts kubeadm's setting uses, held by one identity.
func bindControllerRoles(ctx context.Context, c controlplane.Config) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.SuperAdminKubeconfig())
	if err != nil {
		return err
	}
	cfg.QPS = -1 // some fifty bindings: client-go's default 5 a second would take ten
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	roles, err := client.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("controller roles: %w", err)
	}
	for _, r := range roles.Items {
		if !strings.HasPrefix(r.Name, "system:controller:") {
			continue
		}
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "k8sguide:" + r.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: r.Name},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: kubeadmconstants.ControllerManagerUser}},
		}
		if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("binding %s: %w", r.Name, err)
		}
	}
	return nil
}
