package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/k8sguide/k8sguide/lab/controlplane/server"
	"github.com/k8sguide/k8sguide/lab/netns"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-helpers/apimachinery/lease"
	"k8s.io/klog/v2"
	kubeadmconstants "k8s.io/kubernetes/cmd/kubeadm/app/constants"
	kubeconfigphase "k8s.io/kubernetes/cmd/kubeadm/app/phases/kubeconfig"
	"k8s.io/kubernetes/cmd/kubeadm/app/phases/markcontrolplane"
	kubeletutil "k8s.io/kubernetes/pkg/kubelet/util"
	"k8s.io/utils/clock"

	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/controlplane"
	"github.com/k8sguide/k8sguide/lab/nodecmd"
	"github.com/k8sguide/k8sguide/lab/state"
)

// The kubelet's defaults for the node's heartbeat: a 40 s Lease renewed every quarter of it, and a full status
// report every 5 minutes when nothing changes.
const (
	nodeLeaseDuration     = 40
	nodeLeaseRenew        = 10 * time.Second
	nodeStatusReport      = 5 * time.Minute
	apiServerWaitInterval = 100 * time.Millisecond
)

// WritePKI is `internal pki`: kubeadm's certificates and kubeconfigs for a lab being created.
func WritePKI(ctx context.Context, store state.Store, labName string) error {
	st, err := store.Read(labName)
	if err != nil {
		return err
	}
	names := make([]string, len(st.Nodes))
	for i, n := range st.Nodes {
		names[i] = n.Name
	}
	if err := server.WritePKI(netns.ControlPlaneConfig(store, st.Config, st.Nodes), names); err != nil {
		return err
	}
	if lab.RunsCilium(st.Config.Dataplane) {
		return nil // Cilium's agent replaces kube-proxy
	}
	return writeKubeProxyConfig(store, st)
}

// RunControlPlane is `internal control-plane`, run by the control-plane node's agent.
func RunControlPlane(ctx context.Context, store state.Store, labName string) error {
	st, err := store.Read(labName)
	if err != nil {
		return err
	}
	return server.Run(ctx, netns.ControlPlaneConfig(store, st.Config, st.Nodes))
}

// RunNodeAgent is a node's agent, in the place of kind's kubelet: it registers the Node (addresses, capacity,
// Ready) and keeps its Lease, runs the pods bound to the node (pods_linux.go) and the node's proxy (kube-proxy
// or the Cilium agent, from the manifest `up` writes for it), and on the control-plane node it also runs the control plane (restarting it when it
// dies, as a kubelet restarts its static pods), does what `kubeadm init` does after the apiserver is up (marks
// the node, binds the admins' group), and forwards the host's loopback port to the apiserver (kind's port
// mapping). apiListenerFD is that port's listening socket, or -1.
func RunNodeAgent(ctx context.Context, store state.Store, exe, labName, nodeName string, apiListenerFD int) error {
	st, node, err := readNode(store, labName, nodeName)
	if err != nil {
		return err
	}
	cp := netns.ControlPlaneConfig(store, st.Config, st.Nodes)
	logger := klog.FromContext(ctx).WithValues("node", nodeName)
	ctx = klog.NewContext(ctx, logger)

	if node.Role == lab.ControlPlane {
		ready, err := watchReadiness(ctx, cp)
		if err != nil {
			return err
		}
		go supervise(ctx, store, labName, "control plane", nodecmd.ControlPlaneArgv(exe, labName), store.Dir(labName)+"/control-plane.log", netns.ControlPlaneRecord(store, labName), ready.lost)
		if apiListenerFD >= 0 {
			f := os.NewFile(uintptr(apiListenerFD), "apiserver")
			l, err := net.FileListener(f)
			// The listener holds a close-on-exec copy; the inherited descriptor must not stay open, or every
			// process the agent starts would hold the port and take connections no one answers once the
			// agent and its init are gone.
			f.Close()
			if err != nil {
				return fmt.Errorf("the host's apiserver socket: %w", err)
			}
			go forward(ctx, l, net.JoinHostPort(node.IP, strconv.Itoa(controlplane.Port)), ready.wait)
		}
	}

	client, err := clientFor(cp.NodeKubeconfig(nodeName))
	if err != nil {
		return err
	}
	if err := register(ctx, client, node); err != nil {
		return err
	}
	logger.Info("node registered")
	// Nothing may change the Node before the node-IPAM controller has given it a pod CIDR: an update it sees
	// first makes it allocate a second CIDR, and the one it then releases leaves a hole the next node skips.
	if err := wait.PollUntilContextCancel(ctx, apiServerWaitInterval, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		return err == nil && n.Spec.PodCIDR != "", nil
	}); err != nil {
		return err
	}
	if node.Role == lab.ControlPlane {
		if err := initControlPlane(ctx, cp, len(st.Nodes) > 1, lab.RunsCilium(st.Config.Dataplane)); err != nil {
			return err
		}
	}
	heartbeat := lease.NewController(clock.RealClock{}, client, nodeName, nodeLeaseDuration, nil, nodeLeaseRenew,
		nodeName, v1.NamespaceNodeLease, kubeletutil.SetNodeOwnerFunc(ctx, client, nodeName))
	go heartbeat.Run(ctx)
	registered, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	node.PodCIDR = registered.Spec.PodCIDR
	go runProxy(ctx, store, labName, nodeName)
	go func() {
		if err := runPods(ctx, client, exe, store, labName, node, lab.RunsCilium(st.Config.Dataplane)); err != nil {
			logger.Error(err, "pods")
		}
	}()
	report := time.NewTicker(nodeStatusReport)
	defer report.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-report.C:
			if err := reportStatus(ctx, client, nodeName); err != nil {
				logger.Error(err, "node status")
			}
		}
	}
}

func clientFor(kubeconfig string) (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// supervise runs argv and starts it again whenever it exits, with the kubelet's back-off, until ctx ends, as a
// kubelet restarts a static pod (the control plane) or the kube-proxy pod. The process does not go with the
// agent: a process recordPath names that still runs (the agent restarted) is adopted, not started again.
func supervise(ctx context.Context, store state.Store, labName, what string, argv []string, logPath, recordPath string, onExit func(restartIn time.Duration)) {
	logger := klog.FromContext(ctx).WithValues("process", what)
	backoff := netns.ContainerBackoff()
	status, _ := netns.ReadProcStatus(recordPath)
	for ctx.Err() == nil {
		began := time.Now()
		err := runSupervised(ctx, store, labName, logger, argv, logPath, recordPath)
		if ctx.Err() != nil {
			return
		}
		d := backoff.Delay(time.Since(began))
		if onExit != nil {
			onExit(d)
		}
		at := time.Now().Add(d)
		status = netns.ProcStatus{Restarts: status.Restarts + 1, LastExit: fmt.Sprint(err), LastLog: netns.LastLogLine(logPath), RestartAt: &at}
		netns.WriteJSON(netns.ProcStatusPath(recordPath), status)
		logger.Error(err, "exited; starting it again", "after", d)
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

// runSupervised runs argv once (or adopts the running process recordPath names), until it exits or ctx ends
// (then it is asked to stop, with SIGTERM).
func runSupervised(ctx context.Context, store state.Store, labName string, logger klog.Logger, argv []string, logPath, recordPath string) error {
	if rec, ok := netns.LiveRecord(recordPath); ok {
		if exited, err := netns.WatchExit(store, labName, rec.PID, rec.Start); err == nil {
			logger.Info("adopted", "pid", rec.PID)
			select {
			case code := <-exited:
				return fmt.Errorf("exit status %d", code)
			case <-ctx.Done():
				syscall.Kill(rec.PID, syscall.SIGTERM)
				<-exited
				return ctx.Err()
			}
		}
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return err
	}
	logger.Info("started", "pid", cmd.Process.Pid)
	if err := netns.WriteProcRecord(recordPath, cmd.Process.Pid, ""); err != nil {
		logger.Error(err, "recording the process")
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		cmd.Process.Signal(syscall.SIGTERM)
		err = <-done
	}
	return err
}

// runProxy waits for the node's proxy manifest and then keeps the proxy running, as the kubelet keeps the
// kube-proxy (or cilium-agent) pod of its node.
func runProxy(ctx context.Context, store state.Store, labName, node string) {
	path := netns.ProxyManifest(store, labName, node)
	var argv []string
	if err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		data, err := os.ReadFile(path)
		if err != nil {
			return false, nil
		}
		return true, json.Unmarshal(data, &argv)
	}); err != nil {
		if ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "proxy manifest", "path", path)
		}
		return
	}
	supervise(ctx, store, labName, "proxy", argv, netns.ProxyLog(store, labName, node), netns.ProxyRecord(store, labName, node), nil)
}

// readinessWait bounds how long a connection to the host's port waits for an apiserver that is not ready: less
// than a client's TLS handshake timeout (10 s), so that the client sees its connection cut before its request
// was sent (which k8sguide's client sends again: diagnosingTransport), not a timeout.
const readinessWait = 8 * time.Second

// apiReadiness is whether the apiserver last answered /readyz ok. A restarted apiserver serves before its
// authorizer has read the RBAC objects, and then refuses the admin ("User kubernetes-admin cannot ..."); it is
// not ready until it has.
type apiReadiness struct {
	mu      sync.Mutex
	ready   bool
	changed chan struct{}
	// restartAt is when the control plane that exited starts again.
	restartAt time.Time
	// exits counts the control plane's exits: a /readyz answered before an exit must not make it ready again.
	exits int
}

func (r *apiReadiness) set(ready bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ready != r.ready {
		r.ready = ready
		close(r.changed)
		r.changed = make(chan struct{})
	}
}

// lost is called when the control plane exits: it is not ready from that moment, not from the next poll.
func (r *apiReadiness) lost(restartIn time.Duration) {
	r.mu.Lock()
	r.restartAt = time.Now().Add(restartIn)
	r.exits++
	r.mu.Unlock()
	r.set(false)
}

// polled records a /readyz answer asked for when exits was exitsBefore: an answer to a request that crossed the
// control plane's exit says nothing about the one that starts next.
func (r *apiReadiness) polled(ready bool, exitsBefore int) {
	r.mu.Lock()
	stale := r.exits != exitsBefore
	r.mu.Unlock()
	if !stale {
		r.set(ready)
	}
}

// snapshot is the count of exits so far and the channel closed at the next change.
func (r *apiReadiness) snapshot() (int, chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.exits, r.changed
}

// wait waits, at most readinessWait, until the apiserver is ready. It says false at once when the control
// plane is backed off beyond that: the client is better told now (its error names the wait) than after it.
func (r *apiReadiness) wait() bool {
	deadline := time.After(readinessWait)
	for {
		r.mu.Lock()
		ok, ch, at := r.ready, r.changed, r.restartAt
		r.mu.Unlock()
		if ok {
			return true
		}
		if time.Until(at) > readinessWait {
			return false
		}
		select {
		case <-ch:
		case <-deadline:
			return false
		}
	}
}

// Polling /readyz: often while the apiserver is not ready, so that a client held by forward gets through within
// 100 ms of it becoming ready; seldom once it is. Each /readyz runs the apiserver's readiness checks (an etcd
// read among them) through its authentication and authorization: polled ten times a second, it was over a
// quarter of an idle lab's CPU time (the control plane 4.0 % of a core, 3.3 % without; this agent 1.2 %, 0.25 %
// without). An exit of the control plane is not polled for: supervise reports it (lost), and the poll goes on
// at once.
const (
	notReadyPoll = 100 * time.Millisecond
	readyPoll    = 2 * time.Second
)

// watchReadiness polls the apiserver's /readyz until ctx ends.
func watchReadiness(ctx context.Context, cp controlplane.Config) (*apiReadiness, error) {
	client, err := clientFor(cp.AdminKubeconfig())
	if err != nil {
		return nil, err
	}
	r := &apiReadiness{changed: make(chan struct{})}
	go r.poll(ctx, func(ctx context.Context) error {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(rctx)
		return err
	})
	return r, nil
}

// poll asks readyz until ctx ends, at notReadyPoll or readyPoll after each answer, and at once after a change.
func (r *apiReadiness) poll(ctx context.Context, readyz func(context.Context) error) {
	for ctx.Err() == nil {
		exits, changed := r.snapshot()
		err := readyz(ctx)
		r.polled(err == nil, exits)
		next := notReadyPoll
		if err == nil {
			next = readyPoll
		}
		select {
		case <-ctx.Done():
		case <-changed: // the control plane exited (lost), or this answer changed readiness: ask again now
		case <-time.After(next):
		}
	}
}

// forward copies each connection accepted on the host's loopback to the apiserver, as kind's port mapping does
// for its control-plane container, once the apiserver is ready (see watchReadiness).
func forward(ctx context.Context, l net.Listener, to string, ready func() bool) {
	go func() { <-ctx.Done(); l.Close() }()
	for {
		in, err := l.Accept()
		if err != nil {
			if ctx.Err() == nil {
				klog.FromContext(ctx).Error(err, "apiserver port")
			}
			return
		}
		go func() {
			defer in.Close()
			if !ready() {
				return
			}
			out, err := net.DialTimeout("tcp", to, 5*time.Second)
			if err != nil {
				// The apiserver went away between its last /readyz and now: nothing is sent yet, so wait
				// for the next one once.
				time.Sleep(200 * time.Millisecond)
				if !ready() {
					return
				}
				if out, err = net.DialTimeout("tcp", to, 5*time.Second); err != nil {
					return
				}
			}
			defer out.Close()
			go func() { io.Copy(out, in); out.(*net.TCPConn).CloseWrite() }()
			io.Copy(in, out)
		}()
	}
}

// register creates the node's Node object with its status in the same call, as the kubelet does (creating it
// and then writing the status makes the node-IPAM controller allocate a CIDR twice). It waits for the apiserver.
func register(ctx context.Context, client kubernetes.Interface, n lab.Node) error {
	node := nodeObject(n)
	return wait.PollUntilContextCancel(ctx, apiServerWaitInterval, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		switch {
		case err == nil, apierrors.IsAlreadyExists(err):
			// AlreadyExists: the agent restarted; the Node is ours from before.
			return true, nil
		default:
			klog.FromContext(ctx).V(2).Info("registering", "err", err)
			return false, nil
		}
	})
}

// nodeObject is the Node a kubelet would register for a lab node: kubernetes.io labels, the node's address and
// name, a kubelet's default capacity (110 pods), Ready. The container runtime is none: pods are network
// namespaces running k8sguide's pod server.
func nodeObject(n lab.Node) *v1.Node {
	var uts unix.Utsname
	unix.Uname(&uts)
	kernel := unix.ByteSliceToString(uts.Release[:])
	capacity := v1.ResourceList{
		v1.ResourceCPU:    *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		v1.ResourceMemory: resource.MustParse("8Gi"),
		v1.ResourcePods:   resource.MustParse("110"),
	}
	now := metav1.Now()
	cond := func(t v1.NodeConditionType, s v1.ConditionStatus, reason, msg string) v1.NodeCondition {
		return v1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: n.Name,
			Labels: map[string]string{
				v1.LabelHostname: n.Name, v1.LabelOSStable: "linux", v1.LabelArchStable: runtime.GOARCH,
				"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": runtime.GOARCH,
			},
			Annotations: map[string]string{"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
		},
		Status: v1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity,
			Addresses:   []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: n.IP}, {Type: v1.NodeHostName, Address: n.Name}},
			Conditions: []v1.NodeCondition{
				cond(v1.NodeMemoryPressure, v1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
				cond(v1.NodeDiskPressure, v1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
				cond(v1.NodePIDPressure, v1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
				cond(v1.NodeReady, v1.ConditionTrue, "KubeletReady", "k8sguide's node agent is posting ready status"),
			},
			NodeInfo: v1.NodeSystemInfo{
				KernelVersion:           kernel,
				OSImage:                 "k8sguide netns lab",
				ContainerRuntimeVersion: "netns://k8sguide",
				KubeletVersion:          controlplane.KubernetesVersion,
				OperatingSystem:         "linux",
				Architecture:            runtime.GOARCH,
			},
		},
	}
}

// reportStatus renews the node's conditions' heartbeat, as the kubelet's periodic status report does.
func reportStatus(ctx context.Context, client kubernetes.Interface, name string) error {
	n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	now := metav1.Now()
	for i := range n.Status.Conditions {
		n.Status.Conditions[i].LastHeartbeatTime = now
	}
	_, err = client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	return err
}

// initControlPlane does what `kubeadm init` does once the apiserver answers: bind the kubeadm:cluster-admins
// group (admin.conf's) to cluster-admin, and mark the control-plane node (its label, and the NoSchedule taint
// when the lab has workers: a lab of one node runs its pods on the control plane, as kind removes the taint
// from a cluster without workers).
func initControlPlane(ctx context.Context, cp controlplane.Config, hasWorkers, cilium bool) error {
	admin, err := clientFor(cp.AdminKubeconfig())
	if err != nil {
		return err
	}
	super, err := clientFor(cp.SuperAdminKubeconfig())
	if err != nil {
		return err
	}
	if _, err := kubeconfigphase.EnsureAdminClusterRoleBindingImpl(ctx, admin, super, apiServerWaitInterval, time.Minute); err != nil {
		return fmt.Errorf("binding the admins' group: %w", err)
	}
	var taints []v1.Taint
	if hasWorkers {
		taints = append(taints, v1.Taint{Key: kubeadmconstants.LabelNodeRoleControlPlane, Effect: v1.TaintEffectNoSchedule})
	}
	if err := markcontrolplane.MarkControlPlane(super, cp.NodeName, taints); err != nil {
		return fmt.Errorf("marking the control-plane node: %w", err)
	}
	if cilium {
		return bindCiliumRole(ctx, super)
	}
	return nil
}

// bindCiliumRole gives the ebpf dataplane's node agents what Cilium's Helm chart gives cilium-agent's
// ServiceAccount, as far as they read it: the agents run with kube-proxy's credentials, whose
// system:node-proxier role reads Services, EndpointSlices and Nodes but not the Pods an agent makes endpoints
// for. Cilium's ClusterRole is named cilium; this one holds the read rules the lab's agent uses.
func bindCiliumRole(ctx context.Context, client kubernetes.Interface) error {
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "cilium"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods", "services", "nodes"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "cilium"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cilium"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "system:kube-proxy"}},
	}
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("the cilium ClusterRole: %w", err)
	}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("the cilium ClusterRoleBinding: %w", err)
	}
	return nil
}
