package workload

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/scenarios"
)

var nodes = []lab.Node{
	{Name: "k8s-guide-control-plane", Role: lab.ControlPlane, IP: "172.18.0.2", PodCIDR: "10.244.0.0/24"},
	{Name: "k8s-guide-worker", Role: lab.Worker, IP: "172.18.0.3", PodCIDR: "10.244.1.0/24"},
	{Name: "k8s-guide-worker2", Role: lab.Worker, IP: "172.18.0.4", PodCIDR: "10.244.2.0/24"},
}

func webDeployment(t *testing.T) *Manifest {
	t.Helper()
	m, err := ParseManifest(scenarios.Web)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Deployments) != 1 || m.Deployments[0].Name != "web" || *m.Deployments[0].Spec.Replicas != 3 {
		t.Fatalf("web scenario: %+v", m)
	}
	return m
}

func TestReconcileSpreadsOverWorkersAndScalesDownNewestFirst(t *testing.T) {
	d := webDeployment(t).Deployments[0]
	now := time.Unix(1700000000, 0)
	ch, err := Reconcile(d, nil, nodes, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(ch.Create) != 3 || len(ch.Delete) != 0 {
		t.Fatalf("got %d creates, %d deletes", len(ch.Create), len(ch.Delete))
	}
	perNode := map[string]int{}
	ips := map[string]bool{}
	for i, p := range ch.Create {
		perNode[p.Spec.NodeName]++
		if ips[p.Status.PodIP] {
			t.Fatalf("pod IP %s given twice", p.Status.PodIP)
		}
		ips[p.Status.PodIP] = true
		if !strings.HasPrefix(p.Name, "web-") || p.Labels["app"] != "web" || p.Labels["pod-template-hash"] == "" {
			t.Fatalf("pod %d: name %q labels %v", i, p.Name, p.Labels)
		}
		node := map[string]string{"k8s-guide-worker": "10.244.1.", "k8s-guide-worker2": "10.244.2."}[p.Spec.NodeName]
		if node == "" || !strings.HasPrefix(p.Status.PodIP, node) {
			t.Fatalf("pod %s on %s has IP %s", p.Name, p.Spec.NodeName, p.Status.PodIP)
		}
		ch.Create[i].CreationTimestamp.Time = now.Add(time.Duration(i) * time.Second)
	}
	if perNode["k8s-guide-worker"] != 2 || perNode["k8s-guide-worker2"] != 1 {
		t.Fatalf("spread %v, want 2 on worker and 1 on worker2 (control-plane is tainted)", perNode)
	}
	one := int32(1)
	d.Spec.Replicas = &one
	ch2, err := Reconcile(d, ch.Create, nodes, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(ch2.Delete) != 2 || ch2.Delete[0].Name != ch.Create[2].Name || ch2.Delete[1].Name != ch.Create[1].Name {
		t.Fatalf("scale-down deletes %v, want the two newest", ch2.Delete)
	}
}

func TestEndpointSlices(t *testing.T) {
	d := webDeployment(t).Deployments[0]
	ch, _ := Reconcile(d, nil, nodes, time.Now())
	pods := ch.Create
	MarkReady(&pods[0], time.Now())
	MarkReady(&pods[1], time.Now())
	svc := v1.Service{Spec: v1.ServiceSpec{Selector: map[string]string{"app": "web"},
		Ports: []v1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80), Protocol: v1.ProtocolTCP}}}}
	svc.Name, svc.Namespace = "web", "default"
	slices := EndpointSlices([]v1.Service{svc}, pods, nil, 7, time.Now())
	if len(slices) != 1 {
		t.Fatalf("%d slices", len(slices))
	}
	s := slices[0]
	if s.Labels["kubernetes.io/service-name"] != "web" || !strings.HasPrefix(s.Name, "web-") || s.ResourceVersion != "7" {
		t.Fatalf("slice meta %+v", s.ObjectMeta)
	}
	if len(s.Endpoints) != 3 || len(s.Ports) != 1 || *s.Ports[0].Port != 80 {
		t.Fatalf("slice %+v", s)
	}
	ready := 0
	for _, e := range s.Endpoints {
		if *e.Conditions.Ready {
			ready++
		}
	}
	if ready != 2 {
		t.Fatalf("%d ready endpoints, want 2 (one pod is not ready)", ready)
	}
	// Unchanged input keeps the slice as it was: kube-proxy sees no update.
	again := EndpointSlices([]v1.Service{svc}, pods, slices, 8, time.Now())
	if again[0].Name != s.Name || again[0].ResourceVersion != "7" {
		t.Fatalf("unchanged slice was rewritten: %s rv %s", again[0].Name, again[0].ResourceVersion)
	}
}

func TestParseManifestErrors(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"apiVersion: v1\nkind: Secret\nmetadata: {name: x}\n", "unsupported kind"},
		{"apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: x}\n", "ConfigMap has no metadata.name"},
		{"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {selector: {matchLabels: {a: b}}, template: {metadata: {labels: {a: c}}, spec: {containers: [{name: c}]}}}\n", "does not match"},
		{"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replicaz: 3}\n", "unknown field"},
		{"", "no Deployment or Service"},
	} {
		_, err := ParseManifest([]byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.doc, err, tc.want)
		}
	}
}
