package helminstall

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf/chart"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/kubectl/pkg/util/podutils"

	"helm.sh/helm/v4/pkg/action"
	helmchart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/kube"
	"helm.sh/helm/v4/pkg/registry"
	rcommon "helm.sh/helm/v4/pkg/release/common"
	release "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage/driver"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf/datapath"
)

// The objects Install waits for, as the chart names them.
const (
	agentDaemonSet     = "cilium"
	operatorDeployment = "cilium-operator"
)

// pollInterval is how often Install checks the agents and the operator.
var pollInterval = 2 * time.Second

// Install installs Cilium (or upgrades the release if it is already there) with chart.Values(o), the chart
// pulled from chart.ChartRepo at chart.Version(), into the cluster of kubeconfigPath's current context ("" means
// kubectl's default: $KUBECONFIG or ~/.kube/config). It then waits until the Cilium agents (DaemonSet
// cilium) and the operator (Deployment cilium-operator) are rolled out and ready. timeout bounds the
// whole call; progress goes to log (nil: discarded). Errors are one line; when the wait times out the
// error is "waited <timeout> for Cilium to be ready: <what is not ready>".
func Install(ctx context.Context, kubeconfigPath string, o chart.Options, timeout time.Duration, log io.Writer) error {
	return install(ctx, kubeconfigPath, nil, o, timeout, log)
}

// InstallChart is Install with a chart Fetch returned: a kind lab fetches it before it makes the cluster, so
// that a registry that does not answer costs no cluster.
func InstallChart(ctx context.Context, kubeconfigPath string, ch *helmchart.Chart, o chart.Options, timeout time.Duration, log io.Writer) error {
	return install(ctx, kubeconfigPath, ch, o, timeout, log)
}

// Fetch is the chart Install installs for o: Cilium's own source (o.Local) or chart.ChartRepo's at chart.Version().
func Fetch(ctx context.Context, o chart.Options, log io.Writer) (*helmchart.Chart, error) {
	if log == nil {
		log = io.Discard
	}
	if o.Local {
		dir, err := chart.SourceChartDir()
		if err != nil {
			return nil, fmt.Errorf("installing Cilium: %v", err)
		}
		fmt.Fprintf(log, "Chart: Cilium's own source, github.com/cilium/cilium@%s/install/kubernetes/cilium\n", datapath.CiliumVersion)
		ch, err := LoadChart(dir)
		if err != nil {
			return nil, fmt.Errorf("installing Cilium: %v", err)
		}
		return ch, nil
	}
	fmt.Fprintf(log, "Pulling Cilium chart %s:%s\n", chart.ChartRepo, chart.Version())
	ch, err := pullChart(ctx, chartRef())
	if err != nil {
		return nil, fmt.Errorf("pulling Cilium chart %s:%s: %s (without a registry: make cilium-images, then up again)", chart.ChartRepo, chart.Version(), oneLine(err))
	}
	return ch, nil
}

func install(ctx context.Context, kubeconfigPath string, ch *helmchart.Chart, o chart.Options, timeout time.Duration, log io.Writer) error {
	if log == nil {
		log = io.Discard
	}
	log = &lockedWriter{w: log} // Helm's logger writes from its own goroutines
	vals, err := chart.Values(o)
	if err != nil {
		return err
	}
	if timeout <= 0 {
		return fmt.Errorf("installing Cilium: timeout %v is not positive", timeout)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	// The cluster first: a bad kubeconfig should not cost a chart download.
	if kubeconfigPath != "" {
		if _, err := os.Stat(kubeconfigPath); err != nil {
			return fmt.Errorf("installing Cilium: kubeconfig: %v", err)
		}
	}
	flags := kubeFlags(kubeconfigPath)
	restConfig, err := flags.ToRESTConfig()
	if err != nil {
		return fmt.Errorf("installing Cilium: kubeconfig %s: %s", kubeconfigLabel(kubeconfigPath), oneLine(err))
	}
	clients, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return fmt.Errorf("installing Cilium: %s", oneLine(err))
	}
	cfg := action.NewConfiguration(action.ConfigurationSetLogger(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err := cfg.Init(flags, chart.Namespace, "secret"); err != nil {
		return fmt.Errorf("installing Cilium: %s", oneLine(err))
	}
	if err := cfg.KubeClient.IsReachable(); err != nil {
		return fmt.Errorf("installing Cilium: kubeconfig %s: %s", kubeconfigLabel(kubeconfigPath), oneLine(err))
	}

	if ch == nil {
		if ch, err = Fetch(ctx, o, log); err != nil {
			return err
		}
	}

	if err := withoutCapabilities(ch, vals, o.WithoutCapabilities); err != nil {
		return fmt.Errorf("installing Cilium: %v", err)
	}
	if err := installOrUpgrade(ctx, cfg, ch, vals, log); err != nil {
		return err
	}

	fmt.Fprintf(log, "Waiting up to %v for the Cilium agents and operator\n", time.Until(deadline(ctx)).Round(time.Second))
	if err := waitReady(ctx, clients, log); err != nil {
		return waitFailed(err, timeout)
	}
	fmt.Fprintf(log, "Cilium %s is ready\n", datapath.CiliumVersion)
	return nil
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// chartRef is the OCI reference registry.Client.Pull takes: chart.ChartRepo without its scheme, tagged chart.Version().
func chartRef() string {
	return strings.TrimPrefix(chart.ChartRepo, registry.OCIScheme+"://") + ":" + chart.Version()
}

func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

func kubeconfigLabel(p string) string {
	if p == "" {
		return "(default)"
	}
	return p
}

// kubeFlags is the REST client getter Helm's actions take, for kubeconfigPath's current context. It is
// built here rather than with cli.New(), which would also read HELM_* settings from the environment.
func kubeFlags(kubeconfigPath string) *genericclioptions.ConfigFlags {
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &kubeconfigPath
	ns := chart.Namespace
	flags.Namespace = &ns
	flags.WrapConfigFn = func(c *rest.Config) *rest.Config {
		// client-go's default 5 QPS / burst 10 throttles Helm's discovery and apply calls; Helm's CLI
		// raises the burst the same way.
		c.QPS, c.Burst = 50, 100
		return c
	}
	return flags
}

// pullChart pulls the chart from the OCI registry (anonymously unless Helm's or Docker's credential stores
// hold credentials for it) and loads it. registry.Client.Pull takes no context, so a cancelled ctx
// abandons it. opts are for tests.
func pullChart(ctx context.Context, ref string, opts ...registry.ClientOption) (*helmchart.Chart, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	type result struct {
		ch  *helmchart.Chart
		err error
	}
	done := make(chan result, 1)
	go func() {
		client, err := registry.NewClient(append([]registry.ClientOption{registry.ClientOptEnableCache(true)}, opts...)...)
		if err != nil {
			done <- result{err: err}
			return
		}
		res, err := client.Pull(ref)
		if err != nil {
			done <- result{err: err}
			return
		}
		ch, err := loader.LoadArchive(bytes.NewReader(res.Chart.Data))
		if err != nil {
			done <- result{err: err}
			return
		}
		done <- result{ch: ch, err: checkChart(ch, ref)}
	}()
	select {
	case r := <-done:
		return r.ch, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// installOrUpgrade is `helm upgrade --install`: install when the release does not exist (or was
// uninstalled with its history kept), else upgrade it, resetting its values to the chart's plus vals.
// It does not wait for the workloads (waitReady does, with better errors), only for hooks.
func installOrUpgrade(ctx context.Context, cfg *action.Configuration, ch *helmchart.Chart, vals map[string]any, log io.Writer) error {
	var last *release.Release
	latest, err := cfg.Releases.Last(chart.ReleaseName) // the highest revision, whatever its status
	notFound := errors.Is(err, driver.ErrReleaseNotFound)
	if err != nil && !notFound {
		return fmt.Errorf("installing Cilium: reading release %s/%s: %s", chart.Namespace, chart.ReleaseName, oneLine(err))
	}
	if err == nil {
		last, _ = latest.(*release.Release)
	}
	remaining := time.Until(deadline(ctx))

	if notFound || last == nil || last.Info == nil || last.Info.Status == rcommon.StatusUninstalled {
		fmt.Fprintf(log, "Installing Cilium %s (release %s/%s)\n", datapath.CiliumVersion, chart.Namespace, chart.ReleaseName)
		in := action.NewInstall(cfg)
		in.ReleaseName = chart.ReleaseName
		in.Namespace = chart.Namespace
		in.WaitStrategy = kube.HookOnlyStrategy
		in.Timeout = remaining
		in.Replace = last != nil // reuse the name of an uninstalled release whose history was kept
		if _, err := in.RunWithContext(ctx, ch, vals); err != nil {
			return fmt.Errorf("installing Cilium %s: %s", datapath.CiliumVersion, oneLine(err))
		}
		return nil
	}

	if last.Info.Status.IsPending() {
		return fmt.Errorf("installing Cilium: release %s/%s is %s (an earlier install or upgrade was interrupted): roll it back or uninstall it (helm -n %s uninstall %s), or recreate the cluster",
			chart.Namespace, chart.ReleaseName, last.Info.Status, chart.Namespace, chart.ReleaseName)
	}
	fmt.Fprintf(log, "Upgrading Cilium release %s/%s (revision %d, %s) to %s\n", chart.Namespace, chart.ReleaseName, last.Version, last.Info.Status, datapath.CiliumVersion)
	up := action.NewUpgrade(cfg)
	up.Namespace = chart.Namespace
	up.WaitStrategy = kube.HookOnlyStrategy
	up.Timeout = remaining
	up.ResetValues = true // the values are all k8sguide's: what chart.Values returns now is the whole truth
	up.MaxHistory = 10
	if _, err := up.RunWithContext(ctx, chart.ReleaseName, ch, vals); err != nil {
		return fmt.Errorf("upgrading Cilium to %s: %s", datapath.CiliumVersion, oneLine(err))
	}
	return nil
}

// waitReady polls until DaemonSet cilium and Deployment cilium-operator are rolled out (the current
// generation observed, every pod updated) and ready, or ctx ends; the error then says what is not ready.
func waitReady(ctx context.Context, c kubernetes.Interface, log io.Writer) error {
	var last, said string
	for {
		problems := readiness(ctx, c)
		if len(problems) == 0 {
			return nil
		}
		var details, summaries []string
		for _, p := range problems {
			details = append(details, p.Detail)
			summaries = append(summaries, "  "+p.Summary+"\n")
		}
		last = strings.Join(details, "; ")
		// Progress a line per object, its pods counted by state, so that it fits a class's 100-column
		// terminal; the error, if the wait fails, names the pods.
		if s := strings.Join(summaries, ""); s != said {
			fmt.Fprint(log, s)
			said = s
		}
		select {
		case <-ctx.Done():
			return &notReadyError{what: last, err: ctx.Err()}
		case <-time.After(pollInterval):
		}
	}
}

// waitFailed is Install's error for waitReady's: "waited <timeout> for Cilium to be ready: <what>" when time ran out.
func waitFailed(err error, timeout time.Duration) error {
	var nr *notReadyError
	if errors.As(err, &nr) && errors.Is(nr.err, context.DeadlineExceeded) {
		return fmt.Errorf("waited %v for Cilium to be ready: %s", timeout, oneLine(errors.New(nr.what)))
	}
	return fmt.Errorf("waiting for Cilium: %s", oneLine(err))
}

// notReadyError is waitReady's error: what was not ready when ctx ended, and why it ended.
type notReadyError struct {
	what string
	err  error
}

func (e *notReadyError) Error() string { return e.what + " (" + e.err.Error() + ")" }
func (e *notReadyError) Unwrap() error { return e.err }

// problem is one thing that keeps Cilium from being ready: Detail names the pods and why each is not ready,
// Summary counts them by why.
type problem struct{ Detail, Summary string }

func plain(s string) problem { return problem{s, s} }

// readiness lists what keeps the agents and the operator from being ready; empty means ready.
func readiness(ctx context.Context, c kubernetes.Interface) []problem {
	var problems []problem
	ds, err := c.AppsV1().DaemonSets(chart.Namespace).Get(ctx, agentDaemonSet, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		problems = append(problems, plain(fmt.Sprintf("DaemonSet %s/%s not found", chart.Namespace, agentDaemonSet)))
	case err != nil:
		problems = append(problems, plain(fmt.Sprintf("DaemonSet %s/%s: %v", chart.Namespace, agentDaemonSet, err)))
	default:
		if p := daemonSetProblem(ds); p != "" {
			detail, summary := podProblems(ctx, c, ds.Spec.Selector)
			problems = append(problems, problem{p + detail, p + summary})
		}
	}
	dep, err := c.AppsV1().Deployments(chart.Namespace).Get(ctx, operatorDeployment, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		problems = append(problems, plain(fmt.Sprintf("Deployment %s/%s not found", chart.Namespace, operatorDeployment)))
	case err != nil:
		problems = append(problems, plain(fmt.Sprintf("Deployment %s/%s: %v", chart.Namespace, operatorDeployment, err)))
	default:
		if p := deploymentProblem(dep); p != "" {
			detail, summary := podProblems(ctx, c, dep.Spec.Selector)
			problems = append(problems, problem{p + detail, p + summary})
		}
	}
	return problems
}

// daemonSetProblem is kubectl rollout status's test for a DaemonSet, plus readiness: "" when every
// scheduled pod runs the current template and is available.
func daemonSetProblem(ds *appsv1.DaemonSet) string {
	s := ds.Status
	name := fmt.Sprintf("DaemonSet %s/%s", ds.Namespace, ds.Name)
	switch {
	case s.ObservedGeneration < ds.Generation:
		return name + ": update not yet observed"
	case s.DesiredNumberScheduled == 0:
		return name + ": no nodes to run on yet"
	case s.UpdatedNumberScheduled < s.DesiredNumberScheduled:
		return fmt.Sprintf("%s: %d of %d agents updated", name, s.UpdatedNumberScheduled, s.DesiredNumberScheduled)
	case s.NumberAvailable < s.DesiredNumberScheduled || s.NumberReady < s.DesiredNumberScheduled:
		return fmt.Sprintf("%s: %d of %d agents ready", name, s.NumberReady, s.DesiredNumberScheduled)
	}
	return ""
}

// deploymentProblem is kubectl rollout status's test for a Deployment: "" when all replicas are updated,
// no old ones remain and all are available.
func deploymentProblem(d *appsv1.Deployment) string {
	s := d.Status
	name := fmt.Sprintf("Deployment %s/%s", d.Namespace, d.Name)
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	switch {
	case s.ObservedGeneration < d.Generation:
		return name + ": update not yet observed"
	case s.UpdatedReplicas < want:
		return fmt.Sprintf("%s: %d of %d replicas updated", name, s.UpdatedReplicas, want)
	case s.Replicas > s.UpdatedReplicas:
		return fmt.Sprintf("%s: %d old replicas pending termination", name, s.Replicas-s.UpdatedReplicas)
	case s.AvailableReplicas < want:
		return fmt.Sprintf("%s: %d of %d replicas available", name, s.AvailableReplicas, want)
	}
	return ""
}

// podProblems names, for the pods of selector that are not ready, why (a waiting container's reason such
// as ImagePullBackOff or CrashLoopBackOff, or the pod's phase), as " (pod cilium-x on kind-worker:
// CrashLoopBackOff, ...)", and counts them by why (" (2 Pending, 1 cilium-agent CrashLoopBackOff)"); "" when
// there is nothing to add.
func podProblems(ctx context.Context, c kubernetes.Interface, selector *metav1.LabelSelector) (detail, summary string) {
	if selector == nil {
		return "", ""
	}
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return "", ""
	}
	pods, err := c.CoreV1().Pods(chart.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return "", ""
	}
	var out []string
	count := map[string]int{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if podutils.IsPodReady(p) || p.DeletionTimestamp != nil {
			continue
		}
		why := string(p.Status.Phase)
		for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "PodInitializing" && w.Reason != "ContainerCreating" {
				why = cs.Name + " " + w.Reason
				break
			}
			if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
				why = fmt.Sprintf("%s exited %d (%s)", cs.Name, t.ExitCode, t.Reason)
				break
			}
		}
		if why == "" {
			why = "not ready"
		}
		node := p.Spec.NodeName
		if node == "" {
			node = "no node"
		}
		out = append(out, fmt.Sprintf("pod %s on %s: %s", p.Name, node, why))
		count[why]++
	}
	if len(out) == 0 {
		return "", ""
	}
	sort.Strings(out)
	if len(out) > 3 {
		out = append(out[:3], fmt.Sprintf("%d more", len(out)-3))
	}
	var counts []string
	for why, n := range count {
		counts = append(counts, fmt.Sprintf("%d %s", n, why))
	}
	sort.Strings(counts)
	return " (" + strings.Join(out, ", ") + ")", " (pods: " + strings.Join(counts, ", ") + ")"
}
