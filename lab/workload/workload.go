// Package workload is a lab's Kubernetes objects through its apiserver (client-go), one implementation for every
// provider: server-side apply, `kubectl expose`'s Service, rollout waits, listings. It also holds what both
// providers compute from a pod CIDR.
package workload

import (
	"fmt"
	"net/netip"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
