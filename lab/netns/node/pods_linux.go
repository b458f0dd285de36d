package node

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/k8sguide/k8sguide/lab/netns"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/probe"
	httpprobe "k8s.io/kubernetes/pkg/probe/http"
	tcpprobe "k8s.io/kubernetes/pkg/probe/tcp"
	"k8s.io/utils/ptr"

	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/nodecmd"
	"github.com/k8sguide/k8sguide/lab/state"
	"github.com/k8sguide/k8sguide/lab/workload"
)

// A netns lab's pods: the node agent does for each pod bound to its node what a kubelet and its CNI plugin do —
// a network namespace with a veth on the node's pod bridge and an address from the node's pod CIDR, the pod's
// "containers" (k8sguide's pod server on every declared port: the image is not pulled, and the pod's events say
// so), readiness (the pod's own readinessProbe, by the kubelet's own probers), the pod's status, restarts by
// restartPolicy with the kubelet's back-off, and teardown when the pod is deleted.

// startTimeout bounds the wait for a started pod server to listen (an emulated CPU is slow).
const startTimeout = time.Minute

// podRunner runs the pods bound to one node.
type podRunner struct {
	client   kubernetes.Interface
	exe      string
	store    state.Store
	labName  string
	node     lab.Node
	logDir   string
	recorder record.EventRecorder
	logger   klog.Logger

	mu      sync.Mutex
	workers map[types.UID]*podWorker
	ipam    *podIPAM
	// reserved are the addresses of pod servers a previous agent left running, until their pods claim them.
	reserved map[types.UID]netip.Addr
	// cilium: pods are wired as Cilium's CNI plugin wires them (a veth of their own, no bridge), for the
	// ebpf dataplane's agent to make their endpoints.
	cilium bool
}

// runPods watches the pods bound to node (as the kubelet does, by field selector) and runs each until ctx ends.
func runPods(ctx context.Context, client kubernetes.Interface, exe string, store state.Store, labName string, node lab.Node, cilium bool) error {
	ipam, err := newPodIPAM(node.PodCIDR)
	if err != nil {
		return err
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	r := &podRunner{
		client: client, exe: exe, store: store, labName: labName, node: node, logDir: store.Dir(labName),
		recorder: broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "kubelet", Host: node.Name}),
		logger:   klog.FromContext(ctx).WithName("pods"),
		workers:  map[types.UID]*podWorker{},
		ipam:     ipam,
		cilium:   cilium,
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "spec.nodeName=" + node.Name
	}))
	informer := factory.Core().V1().Pods().Informer()
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.update(ctx, obj.(*v1.Pod)) },
		UpdateFunc: func(_, obj any) { r.update(ctx, obj.(*v1.Pod)) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*v1.Pod); ok {
				r.gone(pod.UID)
			}
		},
	}); err != nil {
		return err
	}
	// The pod servers a previous agent left running keep their addresses: reserved before any pod new to the
	// node is given one.
	r.reserveAdopted()
	factory.Start(ctx.Done())
	if cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		// What a previous agent left of pods deleted while no agent ran goes, as the kubelet's orphan cleanup.
		bound := map[types.UID]bool{}
		for _, obj := range informer.GetStore().List() {
			bound[obj.(*v1.Pod).UID] = true
		}
		for _, uid := range r.leftovers() {
			if !bound[uid] && !r.known(uid) {
				r.sweep(ctx, uid)
			}
		}
	}
	<-ctx.Done()
	factory.Shutdown()
	// A copy: each worker removes itself from the map as it ends.
	r.mu.Lock()
	workers := slices.Collect(maps.Values(r.workers))
	r.mu.Unlock()
	for _, w := range workers {
		w.cancel()
		<-w.done
	}
	return nil
}

// update hands a pod's latest version to its worker, starting one for a pod new to this node.
func (r *podRunner) update(ctx context.Context, pod *v1.Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.workers[pod.UID]
	if !ok {
		// A pod that ended, or whose worker already tore it down for its deletion (a late update), has nothing
		// running here: never start it again.
		if pod.DeletionTimestamp != nil || pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
			go func() {
				// A server a previous agent left for it stops first (it was deleted while no agent ran).
				r.sweep(ctx, pod.UID)
				if pod.DeletionTimestamp != nil {
					r.finishDeletion(ctx, pod)
				}
			}()
			return
		}
		wctx, cancel := context.WithCancel(ctx)
		w = &podWorker{r: r, uid: pod.UID, cancel: cancel, updates: make(chan *v1.Pod, 1), done: make(chan struct{}),
			logger: r.logger.WithValues("pod", klog.KObj(pod))}
		r.workers[pod.UID] = w
		go func() {
			defer close(w.done)
			w.run(wctx, pod)
			r.mu.Lock()
			delete(r.workers, pod.UID)
			r.mu.Unlock()
		}()
		return
	}
	// Keep only the newest version: a worker only ever needs the latest spec and deletion stamp.
	select {
	case <-w.updates:
	default:
	}
	w.updates <- pod
}

// serverRecord is the record of a pod's running server on this node.
func (r *podRunner) serverRecord(uid types.UID) string {
	return netns.ProcRecordPath(r.store, r.labName, r.node.Name+"/pod-"+string(uid))
}

// liveServer is the pod server a previous agent of this node started for pod uid, if it still runs in the
// pod's namespace.
func (r *podRunner) liveServer(uid types.UID) (netns.ProcRecord, bool) {
	rec, ok := netns.LiveRecord(r.serverRecord(uid))
	if !ok || !netns.ProcessInNamespace(rec.PID, netns.PodNamespace(r.labName, uid)) {
		return netns.ProcRecord{}, false
	}
	return rec, true
}

// reserveAdopted reserves the addresses of the pod servers still running from a previous agent.
func (r *podRunner) reserveAdopted() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reserved = map[types.UID]netip.Addr{}
	for _, uid := range r.leftovers() {
		if rec, ok := r.liveServer(uid); ok {
			if ip, err := netip.ParseAddr(rec.IP); err == nil && r.ipam.reserve(ip) {
				r.reserved[uid] = ip
			}
		}
	}
}

// claim takes the address reserveAdopted kept for pod uid.
func (r *podRunner) claim(uid types.UID) (netip.Addr, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ip, ok := r.reserved[uid]
	delete(r.reserved, uid)
	return ip, ok
}

// leftovers are the pods whose servers this node's agents recorded and did not tear down.
func (r *podRunner) leftovers() []types.UID {
	entries, _ := os.ReadDir(filepath.Dir(r.serverRecord("x")))
	var uids []types.UID
	for _, e := range entries {
		if uid, ok := strings.CutPrefix(e.Name(), "pod-"); ok {
			if uid, ok := strings.CutSuffix(uid, ".json"); ok {
				uids = append(uids, types.UID(uid))
			}
		}
	}
	return uids
}

func (r *podRunner) known(uid types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.workers[uid]
	return ok
}

// sweep removes what a previous agent left of a pod that no longer runs here: its server, its namespace, its
// address and record.
func (r *podRunner) sweep(ctx context.Context, uid types.UID) {
	if err := netns.RemoveNamespace(ctx, netns.PodNamespace(r.labName, uid)); err != nil {
		r.logger.Error(err, "removing a deleted pod's namespace", "uid", uid)
		return
	}
	if ip, ok := r.claim(uid); ok {
		r.ipam.release(ip)
	}
	os.Remove(r.serverRecord(uid))
}

// restartCount is the restart count the pod's status holds (a restarted agent goes on counting).
func restartCount(pod *v1.Pod) int32 {
	for _, cs := range pod.Status.ContainerStatuses {
		return cs.RestartCount
	}
	return 0
}

// runningSince is when the pod's running server started, as its status says (zero if it does not).
func runningSince(pod *v1.Pod) time.Time {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Running != nil {
			return cs.State.Running.StartedAt.Time
		}
	}
	return time.Time{}
}

// exitCode is a process's exit code as a container runtime reports it: 128 plus the signal that killed it.
func exitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// gone stops the worker of a pod removed from the API without a graceful deletion (a force delete).
func (r *podRunner) gone(uid types.UID) {
	r.mu.Lock()
	w, ok := r.workers[uid]
	r.mu.Unlock()
	if ok {
		w.cancel()
	}
}

// finishDeletion removes a terminated pod from the API once its deletion was asked for, as the kubelet's status
// manager does (grace period 0, only this pod: the UID is a precondition).
func (r *podRunner) finishDeletion(ctx context.Context, pod *v1.Pod) {
	err := r.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0), Preconditions: metav1.NewUIDPreconditions(string(pod.UID))})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		r.logger.Error(err, "deleting a terminated pod", "pod", klog.KObj(pod))
	}
}

// podIPAM hands out a node's pod addresses as the host-local IPAM plugin does: the next free address after the
// last one given, wrapping, so an address just freed is not handed out again at once (a peer's ARP and conntrack
// entries for it would otherwise reach the new pod).
type podIPAM struct {
	mu     sync.Mutex
	prefix netip.Prefix
	used   map[netip.Addr]bool
	last   netip.Addr
}

func newPodIPAM(cidr string) (*podIPAM, error) {
	gw, err := workload.Gateway(cidr)
	if err != nil {
		return nil, fmt.Errorf("pod CIDR %q: %w", cidr, err)
	}
	return &podIPAM{prefix: gw.Masked(), used: map[netip.Addr]bool{}, last: gw.Addr()}, nil
}

// allocate gives the next free address: not the network's, the gateway's (the first) or the broadcast's.
func (a *podIPAM) allocate() (netip.Addr, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	size := 1 << (32 - a.prefix.Bits())
	ip := a.last
	for range size {
		ip = ip.Next()
		if !a.prefix.Contains(ip) {
			ip = a.prefix.Addr().Next() // wrap to the gateway; the next turn skips it
			continue
		}
		if ip == a.prefix.Addr().Next() || !a.prefix.Contains(ip.Next()) || a.used[ip] {
			continue
		}
		a.used[ip], a.last = true, ip
		return ip, nil
	}
	return netip.Addr{}, fmt.Errorf("pod CIDR %s is full", a.prefix)
}

// reserve marks an address a pod already holds (a pod found running when the agent starts).
func (a *podIPAM) reserve(ip netip.Addr) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.prefix.Contains(ip) || a.used[ip] {
		return false
	}
	a.used[ip] = true
	return true
}

func (a *podIPAM) release(ip netip.Addr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.used, ip)
}

// podWorker runs one pod, from its namespace's creation to its teardown.
type podWorker struct {
	r       *podRunner
	uid     types.UID
	cancel  context.CancelFunc
	updates chan *v1.Pod
	done    chan struct{}
	logger  klog.Logger

	pod     *v1.Pod // the latest version seen
	ip      netip.Addr
	netns   string
	started metav1.Time
	pid     int // the running pod server's
	// adopted is the pod server a previous agent started, still running, which this worker takes over.
	adopted  *netns.ProcRecord
	restarts int32
	last     *v1.ContainerStateTerminated
}

// run is the pod's life on this node. It returns once the pod is torn down.
func (w *podWorker) run(ctx context.Context, pod *v1.Pod) {
	w.pod = pod
	w.netns = netns.PodNamespace(w.r.labName, pod.UID)
	defer w.teardown()
	if pod.Spec.HostNetwork {
		w.r.recorder.Event(pod, v1.EventTypeWarning, "FailedCreatePodSandBox", "hostNetwork pods do not run in a netns lab: its pods are network namespaces of their own")
		w.waitForDeletion(ctx)
		return
	}
	if err := w.start(ctx); err != nil {
		if ctx.Err() == nil {
			w.logger.Error(err, "pod sandbox")
			w.r.recorder.Eventf(pod, v1.EventTypeWarning, "FailedCreatePodSandBox", "Failed to create pod sandbox: %v", err)
		}
		w.waitForDeletion(ctx)
		return
	}
	w.runContainers(ctx)
}

// waitForDeletion waits, doing nothing, until the pod is deleted.
func (w *podWorker) waitForDeletion(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case pod := <-w.updates:
			w.pod = pod
			if pod.DeletionTimestamp != nil {
				return
			}
		}
	}
}

// start makes the pod's sandbox: its namespace, plugged into the node's pod bridge with hairpin on (so a pod
// reaches itself through its own Service), and its address. A pod that had an address before (the agent
// restarted) keeps it.
func (w *podWorker) start(ctx context.Context) error {
	w.restarts = restartCount(w.pod)
	if rec, ok := w.r.liveServer(w.pod.UID); ok {
		if ip, ok := w.r.claim(w.pod.UID); ok && ip.String() == rec.IP {
			// The agent restarted: the pod's sandbox and server are still there, as a kubelet finds its
			// pods' containers running when it comes back.
			w.ip, w.adopted = ip, &rec
			w.started = metav1.Now()
			if t := w.pod.Status.StartTime; t != nil {
				w.started = *t
			}
			w.logger.Info("adopted the running pod server", "pid", rec.PID)
			return nil
		}
	}
	ip := netip.Addr{}
	if old, err := netip.ParseAddr(w.pod.Status.PodIP); err == nil && w.r.ipam.reserve(old) {
		ip = old
	} else if ip, err = w.r.ipam.allocate(); err != nil {
		return err
	}
	w.ip = ip
	gw, err := workload.Gateway(w.r.node.PodCIDR)
	if err != nil {
		return err
	}
	// Whatever a previous agent left of this pod goes first.
	if err := netns.RemoveNamespace(ctx, w.netns); err != nil {
		return err
	}
	if err := netns.AddNamespace(ctx, w.netns, netns.LabMark(w.r.store, w.r.labName)); err != nil {
		return err
	}
	sum := sha1.Sum([]byte(w.pod.UID))
	node := w.r.node.Name
	if w.r.cilium {
		// As Cilium's CNI plugin: the host side named lxc and a hash, the pod's address a /32 with its gateway
		// (cilium_host's address) reached on eth0 by link, whose ARP bpf_lxc answers. The node routes the pod
		// through cilium_host; its agent makes the endpoint once the pod's status carries the address.
		hostVeth := "lxc" + hex.EncodeToString(sum[:])[:8]
		for _, args := range [][]string{
			{"-n", w.netns, "link", "set", "lo", "up"},
			{"-n", node, "link", "add", hostVeth, "type", "veth", "peer", "name", "eth0", "netns", w.netns},
			{"-n", node, "link", "set", hostVeth, "up"},
			{"-n", w.netns, "addr", "add", ip.String() + "/32", "dev", "eth0"},
			{"-n", w.netns, "link", "set", "eth0", "up"},
			{"-n", w.netns, "route", "add", gw.Addr().String(), "dev", "eth0", "scope", "link"},
			{"-n", w.netns, "route", "add", "default", "via", gw.Addr().String(), "dev", "eth0"},
		} {
			if err := netns.IPCmd(ctx, args...); err != nil {
				return err
			}
		}
		w.started = metav1.Now()
		w.pulled()
		return nil
	}
	hostVeth := "veth" + hex.EncodeToString(sum[:])[:8]
	for _, args := range [][]string{
		{"-n", w.netns, "link", "set", "lo", "up"},
		{"-n", node, "link", "add", hostVeth, "type", "veth", "peer", "name", "eth0", "netns", w.netns},
		{"-n", node, "link", "set", hostVeth, "master", "cni0"},
		{"-n", node, "link", "set", hostVeth, "type", "bridge_slave", "hairpin", "on"},
		{"-n", node, "link", "set", hostVeth, "up"},
		{"-n", w.netns, "addr", "add", fmt.Sprintf("%s/%d", ip, gw.Bits()), "dev", "eth0"},
		{"-n", w.netns, "link", "set", "eth0", "up"},
		{"-n", w.netns, "route", "add", "default", "via", gw.Addr().String()},
		// The address may have belonged to a deleted pod: forget its old MAC now rather than after the
		// neighbour entry times out (probes and traffic would go to nobody until then).
		{"-n", node, "neigh", "flush", "to", ip.String()},
	} {
		if err := netns.IPCmd(ctx, args...); err != nil {
			return err
		}
	}
	w.started = metav1.Now()
	w.pulled()
	return nil
}

// pulled records, per container, that its image was not pulled.
func (w *podWorker) pulled() {
	for _, c := range w.pod.Spec.Containers {
		w.r.recorder.Eventf(w.pod, v1.EventTypeNormal, "Pulled", "Container image %q not pulled: a netns lab runs k8sguide's pod server in place of container %s", c.Image, c.Name)
	}
}

// ports are what the pod server serves: the TCP and UDP ports the containers declare; a pod that declares none
// serves HTTP on 80, as its nginx would.
func ports(pod *v1.Pod) (tcp, udp []int) {
	for _, c := range pod.Spec.Containers {
		for _, cp := range c.Ports {
			switch cp.Protocol {
			case v1.ProtocolUDP:
				udp = append(udp, int(cp.ContainerPort))
			case v1.ProtocolSCTP:
			default:
				tcp = append(tcp, int(cp.ContainerPort))
			}
		}
	}
	if len(tcp)+len(udp) == 0 {
		tcp = []int{80}
	}
	return tcp, udp
}

// runContainers runs the pod's server, restarts it as restartPolicy says, and keeps the pod's status, until the
// pod is deleted (or the agent stops).
func (w *podWorker) runContainers(ctx context.Context) {
	backoff := netns.ContainerBackoff()
	for {
		began := time.Now()
		var exited <-chan int
		var pid int
		var err error
		if w.adopted != nil {
			pid = w.adopted.PID
			exited, err = netns.WatchExit(w.r.store, w.r.labName, pid, w.adopted.Start)
			w.adopted = nil
			if t := runningSince(w.pod); !t.IsZero() {
				began = t
			}
		} else if exited, pid, err = w.startServer(); err == nil {
			for _, c := range w.pod.Spec.Containers {
				w.r.recorder.Eventf(w.pod, v1.EventTypeNormal, "Created", "Created container %s (k8sguide pod server, pid %d)", c.Name, pid)
				w.r.recorder.Eventf(w.pod, v1.EventTypeNormal, "Started", "Started container %s", c.Name)
			}
		}
		if err != nil {
			w.logger.Error(err, "starting the pod server")
			w.r.recorder.Eventf(w.pod, v1.EventTypeWarning, "Failed", "Error: %v", err)
			return
		}
		w.pid = pid
		state := v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(began)}}
		w.writeStatus(ctx, state, false)
		code, deleted := w.watch(ctx, exited, pid, began, state)
		if deleted || ctx.Err() != nil {
			return
		}
		w.last = &v1.ContainerStateTerminated{ExitCode: int32(code), Reason: reasonOf(code), StartedAt: metav1.NewTime(began), FinishedAt: metav1.Now(),
			ContainerID: containerID(pid)}
		policy := w.pod.Spec.RestartPolicy
		if policy == v1.RestartPolicyNever || (policy == v1.RestartPolicyOnFailure && code == 0) {
			w.writeStatus(ctx, v1.ContainerState{Terminated: w.last}, false)
			w.waitForDeletion(ctx)
			return
		}
		// Back off as the kubelet does: the first restart at once, then 10 s doubling to 5 min; a container
		// that ran for 10 min starts the count again.
		w.restarts++
		if backoff := backoff.Delay(time.Since(began)); backoff > 0 {
			w.writeStatus(ctx, v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
				Message: fmt.Sprintf("back-off %s restarting failed container", backoff)}}, false)
			w.r.recorder.Eventf(w.pod, v1.EventTypeWarning, "BackOff", "Back-off restarting failed container")
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
		}
	}
}

// startServer starts the pod server in the pod's namespace, and records it: it outlives the agent, as a
// container outlives its kubelet, and the agent's next life adopts it.
func (w *podWorker) startServer() (<-chan int, int, error) {
	tcp, udp := ports(w.pod)
	argv := nodecmd.PodServerArgv(w.r.exe, w.pod.Name, w.r.node.Name, tcp, udp)
	logf, err := os.OpenFile(w.r.podLog(w.pod), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, 0, err
	}
	defer logf.Close()
	cmd := exec.Command("ip", append([]string{"netns", "exec", w.netns}, argv...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, 0, err
	}
	pid := cmd.Process.Pid
	exited := make(chan int, 1)
	gone := make(chan struct{})
	go func() {
		cmd.Wait()
		close(gone)
		exited <- exitCode(cmd.ProcessState)
	}()
	// `ip netns exec` becomes the server (same pid); until it has entered the pod's namespace a teardown would
	// not find it there, nor would the next agent adopt it.
	if err := netns.WaitInNamespace(pid, w.netns, gone); err != nil {
		return nil, 0, fmt.Errorf("the pod server: %w", err)
	}
	if err := netns.WriteProcRecord(w.r.serverRecord(w.uid), pid, w.ip.String()); err != nil {
		w.logger.Error(err, "recording the pod server")
	}
	return exited, pid, nil
}

func containerID(pid int) string { return "netns://" + strconv.Itoa(pid) }

func reasonOf(code int) string {
	if code == 0 {
		return "Completed"
	}
	return "Error"
}

// watch probes the running server's readiness and follows the pod's updates until the server exits (its exit
// code) or the pod is deleted (deleted: the server is stopped and the pod torn down by the caller).
func (w *podWorker) watch(ctx context.Context, exited <-chan int, pid int, began time.Time, state v1.ContainerState) (code int, deleted bool) {
	prober := newReadiness(w.pod, w.ip)
	ready := false
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return 0, true
		case code := <-exited:
			w.logger.Info("pod server exited", "code", code)
			return code, false
		case pod := <-w.updates:
			w.pod = pod
			if pod.DeletionTimestamp != nil {
				w.r.recorder.Eventf(pod, v1.EventTypeNormal, "Killing", "Stopping container %s", pod.Spec.Containers[0].Name)
				w.stopServer(pid, exited, pod.DeletionGracePeriodSeconds)
				return 0, true
			}
		case <-timer.C:
			now, next := prober.probe(time.Since(began))
			if now != ready {
				if err := w.writeStatus(ctx, state, now); err != nil {
					next = min(next, time.Second) // not written: probe, and write, again soon
				} else {
					ready = now
				}
			}
			timer.Reset(next)
		}
	}
}

// stopServer sends the pod server SIGTERM and waits out the pod's grace period (at most 5 s: the server stops at
// once) before SIGKILL.
func (w *podWorker) stopServer(pid int, exited <-chan int, grace *int64) {
	syscall.Kill(pid, syscall.SIGTERM)
	wait := 5 * time.Second
	if grace != nil && time.Duration(*grace)*time.Second < wait {
		wait = time.Duration(*grace) * time.Second
	}
	select {
	case <-exited:
	case <-time.After(wait):
		syscall.Kill(pid, syscall.SIGKILL)
		<-exited
	}
}

// teardown removes the pod's namespace (and with it the veth), frees its address and, for a pod being deleted,
// removes it from the API.
func (w *podWorker) teardown() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := netns.RemoveNamespace(ctx, w.netns); err != nil {
		w.logger.Error(err, "removing the pod's namespace")
		return // keep the address: something still holds it
	}
	os.Remove(w.r.serverRecord(w.uid))
	if w.ip.IsValid() {
		w.r.ipam.release(w.ip)
	}
	if w.pod.DeletionTimestamp != nil {
		w.r.finishDeletion(ctx, w.pod)
	}
}

// statusBackoff paces writeStatus's tries: 8 of them over some 20 s.
var statusBackoff = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Steps: 8, Cap: 5 * time.Second}

// writeStatus writes the pod's status as the kubelet's status manager would: phase, conditions, addresses and
// one status per container (they share the pod server). It keeps what others wrote (PodScheduled, QoS class).
// Any failure but the pod's absence is tried again for some 20 s (a busy apiserver on two cores times out now
// and then); it returns the error that remained, so that the caller can write that status again later: a
// status lost once would leave a ready pod NotReady for good, its rollout waiting for nothing.
func (w *podWorker) writeStatus(ctx context.Context, state v1.ContainerState, ready bool) error {
	err := retry.OnError(statusBackoff, func(err error) bool { return ctx.Err() == nil && !apierrors.IsNotFound(err) }, func() error {
		pod, err := w.r.client.CoreV1().Pods(w.pod.Namespace).Get(ctx, w.pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pod.UID != w.uid {
			return nil // a new pod of the same name
		}
		pod.Status = w.status(pod, state, ready)
		_, err = w.r.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	})
	if err == nil || ctx.Err() != nil || apierrors.IsNotFound(err) {
		return nil
	}
	w.logger.Error(err, "writing the pod's status")
	return err
}

func (w *podWorker) status(pod *v1.Pod, state v1.ContainerState, ready bool) v1.PodStatus {
	s := pod.Status
	now := metav1.Now()
	s.Phase = v1.PodRunning
	if t := state.Terminated; t != nil {
		s.Phase = v1.PodFailed
		if t.ExitCode == 0 {
			s.Phase = v1.PodSucceeded
		}
	}
	s.HostIP, s.HostIPs = w.r.node.IP, []v1.HostIP{{IP: w.r.node.IP}}
	s.PodIP, s.PodIPs = w.ip.String(), []v1.PodIP{{IP: w.ip.String()}}
	s.StartTime = &w.started
	running := state.Running != nil
	s.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		cs := v1.ContainerStatus{Name: c.Name, Image: c.Image, State: state, Ready: ready, Started: ptr.To(running), RestartCount: w.restarts}
		if running {
			cs.ContainerID = containerID(w.pid)
		}
		if w.last != nil {
			cs.LastTerminationState = v1.ContainerState{Terminated: w.last}
		}
		s.ContainerStatuses = append(s.ContainerStatuses, cs)
	}
	setCondition(&s, v1.PodReadyToStartContainers, v1.ConditionTrue, now)
	setCondition(&s, v1.PodInitialized, v1.ConditionTrue, now)
	status := v1.ConditionFalse
	if ready {
		status = v1.ConditionTrue
	}
	setCondition(&s, v1.ContainersReady, status, now)
	setCondition(&s, v1.PodReady, status, now)
	return s
}

// setCondition sets a pod condition, moving its transition time only when its status changes.
func setCondition(s *v1.PodStatus, t v1.PodConditionType, status v1.ConditionStatus, now metav1.Time) {
	for i := range s.Conditions {
		if s.Conditions[i].Type == t {
			if s.Conditions[i].Status != status {
				s.Conditions[i].Status, s.Conditions[i].LastTransitionTime = status, now
			}
			return
		}
	}
	s.Conditions = append(s.Conditions, v1.PodCondition{Type: t, Status: status, LastTransitionTime: now})
}

func (r *podRunner) podLog(pod *v1.Pod) string {
	return filepath.Join(r.logDir, "pod-"+pod.Namespace+"_"+pod.Name+".log")
}

// readiness is a pod's readiness as the kubelet's prober worker keeps it: the pod's readinessProbe (HTTP GET or
// TCP socket, with its delay, period, timeout and thresholds), or, for a pod without one, the server listening
// on its first port (the kubelet calls such a pod ready once its container started; the pod server starts in
// milliseconds, and waiting for it to listen keeps a fresh endpoint from refusing its first connection).
type readiness struct {
	pod       *v1.Pod
	container *v1.Container
	spec      *v1.Probe
	ip        netip.Addr
	listening bool
	since     time.Duration // how long the server had run when it first listened
	ready     bool
	successes int32
	failures  int32
}

func newReadiness(pod *v1.Pod, ip netip.Addr) *readiness {
	r := &readiness{pod: pod, ip: ip}
	for i := range pod.Spec.Containers {
		if p := pod.Spec.Containers[i].ReadinessProbe; p != nil && (p.HTTPGet != nil || p.TCPSocket != nil) {
			r.container, r.spec = &pod.Spec.Containers[i], p
			break
		}
	}
	return r
}

// probe runs one probe and says whether the pod is ready, and when to probe next. The probe's schedule starts
// when the server listens (within milliseconds of its start), so a probe period is not lost to a first probe
// that came too early.
func (r *readiness) probe(running time.Duration) (bool, time.Duration) {
	if !r.listening {
		tcp, _ := ports(r.pod)
		if len(tcp) > 0 && !tcpOK(r.ip, tcp[0]) && running < startTimeout {
			return false, 20 * time.Millisecond
		}
		r.listening, r.since = true, running
	}
	p := r.spec
	if p == nil {
		return true, time.Hour
	}
	if delay := time.Duration(p.InitialDelaySeconds)*time.Second + r.since; running < delay {
		return false, delay - running
	}
	timeout := time.Duration(max(p.TimeoutSeconds, 1)) * time.Second
	var result probe.Result
	if p.HTTPGet != nil {
		req, err := httpprobe.NewRequestForHTTPGetAction(p.HTTPGet, r.container, r.ip.String(), "readiness")
		if err == nil {
			result, _, _ = httpprobe.New(false).Probe(req, timeout)
		}
	} else {
		port, err := probe.ResolveContainerPort(p.TCPSocket.Port, r.container)
		host := p.TCPSocket.Host
		if host == "" {
			host = r.ip.String()
		}
		if err == nil {
			result, _, _ = tcpprobe.New().Probe(host, port, timeout)
		}
	}
	if result == probe.Success {
		r.successes, r.failures = r.successes+1, 0
		if r.successes >= max(p.SuccessThreshold, 1) {
			r.ready = true
		}
	} else {
		r.failures, r.successes = r.failures+1, 0
		if r.failures >= max(p.FailureThreshold, 1) {
			r.ready = false
		}
	}
	return r.ready, time.Duration(max(p.PeriodSeconds, 1)) * time.Second
}

func tcpOK(ip netip.Addr, port int) bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort(ip.String(), strconv.Itoa(port)), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
