package helminstall

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf/chart"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf/datapath"
)

// chartDir is the Cilium chart of the sources the datapath is built from (the Go module cache's
// github.com/cilium/cilium@CiliumVersion, which CI downloads).
func chartDir(t *testing.T) string {
	t.Helper()
	dir, err := chart.SourceChartDir()
	if err != nil {
		t.Skipf("Cilium %s chart sources not available, so the chart cannot be rendered: %v", datapath.CiliumVersion, err)
	}
	return dir
}

// rendered is a manifest split into the objects this package cares about.
type rendered struct {
	config   *corev1.ConfigMap
	agent    *appsv1.DaemonSet
	operator *appsv1.Deployment
	kinds    map[string]int
}

func parseManifest(t *testing.T, manifest string) rendered {
	t.Helper()
	r := rendered{kinds: map[string]int{}}
	for _, doc := range strings.Split(manifest, "\n---\n") {
		var head struct {
			Kind     string            `json:"kind"`
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("rendered document does not parse: %v\n%s", err, doc)
		}
		if head.Kind == "" {
			continue
		}
		r.kinds[head.Kind]++
		var into any
		switch {
		case head.Kind == "ConfigMap" && head.Metadata.Name == "cilium-config":
			r.config = &corev1.ConfigMap{}
			into = r.config
		case head.Kind == "DaemonSet" && head.Metadata.Name == agentDaemonSet:
			r.agent = &appsv1.DaemonSet{}
			into = r.agent
		case head.Kind == "Deployment" && head.Metadata.Name == operatorDeployment:
			r.operator = &appsv1.Deployment{}
			into = r.operator
		default:
			continue
		}
		if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
			t.Fatalf("%s %s does not parse as one: %v", head.Kind, head.Metadata.Name, err)
		}
		if head.Metadata.Namespace != chart.Namespace {
			t.Errorf("%s %s is in namespace %q, want %q", head.Kind, head.Metadata.Name, head.Metadata.Namespace, chart.Namespace)
		}
	}
	if r.config == nil || r.agent == nil || r.operator == nil {
		t.Fatalf("manifest lacks cilium-config (%v), DaemonSet cilium (%v) or Deployment cilium-operator (%v); kinds: %v",
			r.config != nil, r.agent != nil, r.operator != nil, r.kinds)
	}
	return r
}

func env(c corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

func TestRenderCiliumChart(t *testing.T) {
	dir := chartDir(t)
	checksums := map[string]string{}
	for _, o := range []chart.Options{
		{ClusterName: "k8sguide", LBAlgorithm: "random", NodePortRange: "31000-31999"},
		{ClusterName: "k8sguide", LBAlgorithm: "maglev", NodePortRange: "31000-31999"},
		{ClusterName: "lab"},
	} {
		t.Run(o.ClusterName+"/"+o.LBAlgorithm, func(t *testing.T) {
			manifest, err := Render(dir, o)
			if err != nil {
				t.Fatal(err)
			}
			r := parseManifest(t, manifest)

			cfg := r.config.Data
			want := map[string]string{
				"kube-proxy-replacement": "true",
				"ipam":                   "kubernetes",
				"bpf-lb-algorithm":       o.LBAlgorithm,
				"node-port-range":        "",
			}
			if o.NodePortRange != "" {
				lo, hi, _ := strings.Cut(o.NodePortRange, "-")
				want["node-port-range"] = lo + "," + hi
			}
			for k, w := range want {
				got, ok := cfg[k]
				switch {
				case w == "" && ok:
					t.Errorf("cilium-config %s = %q, want it unset (Cilium's default)", k, got)
				case w != "" && got != w:
					t.Errorf("cilium-config %s = %q, want %q", k, got, w)
				}
			}

			// Without kube-proxy the agents and the operator reach the API server directly.
			host := o.ClusterName + "-control-plane"
			for _, c := range []corev1.Container{
				container(t, r.agent.Spec.Template.Spec, "cilium-agent"),
				container(t, r.operator.Spec.Template.Spec, "cilium-operator"),
			} {
				if got, _ := env(c, "KUBERNETES_SERVICE_HOST"); got != host {
					t.Errorf("%s KUBERNETES_SERVICE_HOST = %q, want %q", c.Name, got, host)
				}
				if got, _ := env(c, "KUBERNETES_SERVICE_PORT"); got != "6443" {
					t.Errorf("%s KUBERNETES_SERVICE_PORT = %q, want 6443", c.Name, got)
				}
			}
			agent := container(t, r.agent.Spec.Template.Spec, "cilium-agent")
			if !strings.HasPrefix(agent.Image, "quay.io/cilium/cilium:"+datapath.CiliumVersion) {
				t.Errorf("agent image %q is not Cilium %s, the netns engine's release", agent.Image, datapath.CiliumVersion)
			}
			if agent.ImagePullPolicy != corev1.PullIfNotPresent {
				t.Errorf("agent imagePullPolicy = %q, want IfNotPresent", agent.ImagePullPolicy)
			}
			if r.operator.Spec.Replicas == nil || *r.operator.Spec.Replicas != 1 {
				t.Errorf("operator replicas = %v, want 1", r.operator.Spec.Replicas)
			}
			sum := r.agent.Spec.Template.Annotations["cilium.io/cilium-configmap-checksum"]
			if sum == "" {
				t.Errorf("agent pod template has no cilium-config checksum: agents would not restart when an upgrade changes it")
			}
			checksums[o.LBAlgorithm] = sum
			if r.kinds["CustomResourceDefinition"] != 0 {
				t.Errorf("chart renders %d CRDs; Cilium's operator is expected to create them", r.kinds["CustomResourceDefinition"])
			}
		})
	}
	if checksums["random"] == checksums["maglev"] {
		t.Errorf("changing the LB algorithm does not change the agents' pod template (checksum %q)", checksums["random"])
	}
}

// The render path must validate values against the chart's values.schema.json (Install uses the same
// Helm code path), otherwise TestRenderCiliumChart would prove nothing about the schema.
func TestRenderValidatesSchema(t *testing.T) {
	ch, err := LoadChart(chartDir(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(ch.Schema) == 0 {
		t.Fatal("the Cilium chart has no values.schema.json")
	}
	vals, err := chart.Values(chart.Options{ClusterName: "kind"})
	if err != nil {
		t.Fatal(err)
	}
	vals["operator"] = map[string]any{"replicas": "one"} // the schema says integer
	_, err = render(ch, vals)
	if err == nil || !strings.Contains(err.Error(), "schema") || !strings.Contains(err.Error(), "replicas") {
		t.Fatalf("render with operator.replicas=\"one\" = %v, want a values.schema.json error about replicas", err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error is not one line: %q", err)
	}

	if _, err := Render(chartDir(t), chart.Options{ClusterName: "kind", LBAlgorithm: "bogus"}); err == nil {
		t.Fatal("Render with LBAlgorithm bogus succeeded")
	}
}

func TestLoadChartChecksVersion(t *testing.T) {
	src := chartDir(t)
	// A copy of the chart claiming another version must be refused.
	dir := filepath.Join(t.TempDir(), "cilium")
	if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	meta, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	meta = []byte(strings.Replace(string(meta), "\nversion: "+chart.Version()+"\n", "\nversion: 1.19.0\n", 1))
	if err := os.WriteFile(filepath.Join(dir, "Chart.yaml"), meta, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadChart(dir); err == nil || !strings.Contains(err.Error(), "1.19.0") {
		t.Fatalf("LoadChart of a 1.19.0 chart = %v, want a version error", err)
	}
}

func TestInstallFailsFastWithoutCluster(t *testing.T) {
	good := chart.Options{ClusterName: "kind"}
	if err := Install(context.Background(), "", chart.Options{ClusterName: "kind", LBAlgorithm: "bogus"}, time.Minute, nil); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("Install with a bogus algorithm = %v", err)
	}
	missing := filepath.Join(t.TempDir(), "nope")
	if err := Install(context.Background(), missing, good, time.Minute, nil); err == nil || !strings.Contains(err.Error(), "kubeconfig") {
		t.Errorf("Install with a missing kubeconfig = %v", err)
	}

	// A cluster that refuses connections is reported before the chart is pulled (no network here).
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters:
- name: dead
  cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: t}
contexts:
- name: dead
  context: {cluster: dead, user: u}
current-context: dead
`), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var log strings.Builder
	err := Install(context.Background(), kc, good, 30*time.Second, &log)
	if err == nil || !strings.Contains(err.Error(), "unreachable") || strings.Contains(err.Error(), "\n") {
		t.Errorf("Install against a dead API server = %v, want one line saying it is unreachable", err)
	}
	if strings.Contains(log.String(), "Pulling") {
		t.Errorf("Install pulled the chart before checking the cluster: %q", log.String())
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("Install took %v to notice a dead API server", d)
	}
}

func TestWaitReady(t *testing.T) {
	defer func(d time.Duration) { pollInterval = d }(pollInterval)
	pollInterval = 10 * time.Millisecond

	labels := map[string]string{"k8s-app": "cilium"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: agentDaemonSet, Namespace: chart.Namespace, Generation: 2},
		Spec:       appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}},
		Status: appsv1.DaemonSetStatus{ObservedGeneration: 2, DesiredNumberScheduled: 3, UpdatedNumberScheduled: 3,
			NumberReady: 2, NumberAvailable: 2},
	}
	one := int32(1)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: operatorDeployment, Namespace: chart.Namespace, Generation: 1},
		Spec:       appsv1.DeploymentSpec{Replicas: &one},
		Status:     appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1},
	}
	stuck := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "cilium-x7", Namespace: chart.Namespace, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: "kind-worker2"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
			Name: "cilium-agent", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		}}},
	}
	c := fake.NewClientset(ds, dep, stuck)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var log strings.Builder
	err := waitReady(ctx, c, &log)
	if err == nil {
		t.Fatal("waitReady returned nil with 2 of 3 agents ready")
	}
	for _, w := range []string{"2 of 3 agents ready", "cilium-x7 on kind-worker2: cilium-agent CrashLoopBackOff"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("waitReady error %q does not say %q", err, w)
		}
	}
	if strings.Contains(err.Error(), "operator") {
		t.Errorf("waitReady blames the ready operator: %q", err)
	}
	want := "waited 5m0s for Cilium to be ready: DaemonSet kube-system/cilium: 2 of 3 agents ready (pod cilium-x7 on kind-worker2: cilium-agent CrashLoopBackOff)"
	if got := waitFailed(err, 5*time.Minute).Error(); got != want {
		t.Errorf("Install's error after the wait times out:\n got %q\nwant %q", got, want)
	}
	if want := "  DaemonSet kube-system/cilium: 2 of 3 agents ready (pods: 1 cilium-agent CrashLoopBackOff)\n"; log.String() != want {
		t.Errorf("waitReady's progress: %q, want %q", log.String(), want)
	}

	// An upgrade not yet rolled out is not ready even when every pod is.
	ds.Status.NumberReady, ds.Status.NumberAvailable = 3, 3
	ds.Status.UpdatedNumberScheduled = 1
	if _, err := c.AppsV1().DaemonSets(chart.Namespace).UpdateStatus(context.Background(), ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if p := readiness(context.Background(), c); len(p) != 1 || !strings.Contains(p[0].Detail, "1 of 3 agents updated") {
		t.Errorf("readiness during a rollout = %q", p)
	}

	// Ready once rolled out; the operator's absence would also be reported.
	ds.Status.UpdatedNumberScheduled = 3
	if _, err := c.AppsV1().DaemonSets(chart.Namespace).UpdateStatus(context.Background(), ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := waitReady(context.Background(), c, &log); err != nil {
		t.Errorf("waitReady with everything ready: %v", err)
	}
	if err := c.AppsV1().Deployments(chart.Namespace).Delete(context.Background(), operatorDeployment, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if p := readiness(context.Background(), c); len(p) != 1 || !strings.Contains(p[0].Detail, "cilium-operator not found") {
		t.Errorf("readiness without the operator = %q", p)
	}
}
