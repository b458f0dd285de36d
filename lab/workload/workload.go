// Package workload is a lab's Kubernetes objects through its apiserver (client-go), one implementation for every
// provider: server-side apply, `kubectl expose`'s Service, rollout waits, listings. It also holds what both
// providers compute from a pod CIDR.
package workload

import (
	"fmt"
	"maps"
	"net/netip"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/k8sguide/k8sguide/lab"
)

// Gateway is the node-side address of a pod CIDR (the pod bridge's address, the pods' default gateway).
func Gateway(podCIDR string) (netip.Prefix, error) {
	prefix, err := netip.ParsePrefix(podCIDR)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(prefix.Masked().Addr().Next(), prefix.Bits()), nil
}

// ExposeDefaults checks `nodeport`'s options and fills what kubectl expose would: the default namespace, the
// Service named after the Deployment, targetPort equal to the port.
func ExposeDefaults(opts lab.ExposeOptions) (lab.ExposeOptions, error) {
	if opts.Namespace == "" {
		opts.Namespace = metav1.NamespaceDefault
	}
	if opts.Service == "" {
		opts.Service = opts.Deployment
	}
	if opts.Port <= 0 || opts.Port > 65535 {
		return opts, fmt.Errorf("--port %d: must be 1-65535", opts.Port)
	}
	if opts.TargetPort == 0 {
		opts.TargetPort = opts.Port
	}
	return opts, nil
}

// ExposeService is the Service `kubectl expose deployment NAME --type=NodePort --port=PORT [--target-port=N]`
// creates for d: the Deployment's labels and selector, one unnamed TCP port. opts has had ExposeDefaults.
func ExposeService(d *appsv1.Deployment, opts lab.ExposeOptions) *v1.Service {
	return &v1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: opts.Service, Namespace: opts.Namespace, Labels: d.Labels},
		Spec: v1.ServiceSpec{
			Type:                  v1.ServiceTypeNodePort,
			Selector:              d.Spec.Selector.MatchLabels,
			ExternalTrafficPolicy: opts.ExternalTrafficPolicy,
			Ports: []v1.ServicePort{{
				Protocol: v1.ProtocolTCP, Port: opts.Port, TargetPort: intstr.FromInt32(opts.TargetPort), NodePort: opts.NodePort,
			}},
		},
	}
}

// ExposedDiffers says how an existing Service differs from the one ExposeService made ("" when it is the same
// exposure): its type, selector, port, target port, the node port asked for, and the traffic policy. What the
// apiserver fills in (addresses, an allocated node port, defaults) is not a difference.
func ExposedDiffers(have, want *v1.Service) string {
	var diffs []string
	if have.Spec.Type != want.Spec.Type {
		diffs = append(diffs, fmt.Sprintf("type %s", have.Spec.Type))
	}
	if !maps.Equal(have.Spec.Selector, want.Spec.Selector) {
		diffs = append(diffs, fmt.Sprintf("selector %v", labels.Set(have.Spec.Selector)))
	}
	w := want.Spec.Ports[0]
	if len(have.Spec.Ports) != 1 {
		diffs = append(diffs, fmt.Sprintf("%d ports", len(have.Spec.Ports)))
	} else if h := have.Spec.Ports[0]; h.Port != w.Port || h.Protocol != w.Protocol || h.TargetPort.String() != w.TargetPort.String() || (w.NodePort != 0 && h.NodePort != w.NodePort) {
		diffs = append(diffs, fmt.Sprintf("port %d:%d/%s → %s", h.Port, h.NodePort, h.Protocol, h.TargetPort.String()))
	}
	policy := func(p v1.ServiceExternalTrafficPolicy) v1.ServiceExternalTrafficPolicy {
		if p == "" {
			return v1.ServiceExternalTrafficPolicyCluster // the apiserver's default
		}
		return p
	}
	if have.Spec.Type == v1.ServiceTypeNodePort && policy(have.Spec.ExternalTrafficPolicy) != policy(want.Spec.ExternalTrafficPolicy) {
		diffs = append(diffs, fmt.Sprintf("externalTrafficPolicy %s", have.Spec.ExternalTrafficPolicy))
	}
	return strings.Join(diffs, ", ")
}

// MaxReplicas bounds the replicas a command asks for: a lab's node runs at most 110 pods (the kubelet's
// default), and a lab has a few nodes.
const MaxReplicas = 1000

// CheckReplicas refuses a replica count no lab can run.
func CheckReplicas(n int32) error {
	if n < 0 || n > MaxReplicas {
		return fmt.Errorf("--replicas %d: must be 0 to %d", n, MaxReplicas)
	}
	return nil
}
