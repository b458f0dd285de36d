package render

import (
	"fmt"
	"io"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/duration"
)

// List wraps objects the way `kubectl get -o json` does.
func List(items any) map[string]any {
	return map[string]any{"apiVersion": "v1", "kind": "List", "items": items}
}

func age(t time.Time, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t))
}

// Pods prints pods like `kubectl get pods -o wide`.
func Pods(w io.Writer, pods []v1.Pod, now time.Time) error {
	var rows [][]string
	for _, p := range pods {
		ready := 0
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodReady && c.Status == v1.ConditionTrue {
				ready = len(p.Spec.Containers)
			}
		}
		rows = append(rows, []string{p.Name, fmt.Sprintf("%d/%d", ready, len(p.Spec.Containers)), string(p.Status.Phase),
			age(p.CreationTimestamp.Time, now), p.Status.PodIP, p.Spec.NodeName})
	}
	return WriteTable(w, []string{"NAME", "READY", "STATUS", "AGE", "IP", "NODE"}, rows)
}

// Services prints Services like `kubectl get svc`.
func Services(w io.Writer, svcs []v1.Service, now time.Time) error {
	var rows [][]string
	for _, s := range svcs {
		rows = append(rows, []string{s.Name, string(s.Spec.Type), s.Spec.ClusterIP, "<none>", ServicePorts(&s), age(s.CreationTimestamp.Time, now)})
	}
	return WriteTable(w, []string{"NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"}, rows)
}

// ServicePorts renders ports as kubectl does: 80:30510/TCP.
func ServicePorts(s *v1.Service) string {
	var parts []string
	for _, p := range s.Spec.Ports {
		if p.NodePort != 0 {
			parts = append(parts, fmt.Sprintf("%d:%d/%s", p.Port, p.NodePort, p.Protocol))
		} else {
			parts = append(parts, fmt.Sprintf("%d/%s", p.Port, p.Protocol))
		}
	}
	return strings.Join(parts, ",")
}

// Endpoints prints each Service's ready endpoints like `kubectl get ep`.
func Endpoints(w io.Writer, slices []discoveryv1.EndpointSlice, now time.Time) error {
	var rows [][]string
	for _, s := range slices {
		var eps []string
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			for _, p := range s.Ports {
				if p.Port != nil {
					eps = append(eps, fmt.Sprintf("%s:%d", e.Addresses[0], *p.Port))
				}
			}
		}
		list := strings.Join(eps, ",")
		if list == "" {
			list = "<none>"
		}
		rows = append(rows, []string{s.Labels[discoveryv1.LabelServiceName], list, age(s.CreationTimestamp.Time, now)})
	}
	return WriteTable(w, []string{"NAME", "ENDPOINTS", "AGE"}, rows)
}

// Deployments prints Deployments like `kubectl get deploy`.
func Deployments(w io.Writer, ds []appsv1.Deployment, now time.Time) error {
	var rows [][]string
	for _, d := range ds {
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		rows = append(rows, []string{d.Name, fmt.Sprintf("%d/%d", d.Status.ReadyReplicas, want),
			fmt.Sprint(d.Status.UpdatedReplicas), fmt.Sprint(d.Status.AvailableReplicas), age(d.CreationTimestamp.Time, now)})
	}
	return WriteTable(w, []string{"NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"}, rows)
}
