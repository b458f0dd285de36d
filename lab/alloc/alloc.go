// Package alloc gives a lab's Services their ClusterIPs and NodePorts with the kube-apiserver's own allocators
// (k8s.io/kubernetes/pkg/registry/core/service/{ipallocator,portallocator}). Those implement the static and
// dynamic bands of KEP-3668 (seed 002): a dynamic NodePort comes from the upper band while it has room, and an
// explicit one must be in range and free. Errors are wrapped exactly as the apiserver's service REST storage
// wraps them, so a collision reads as it would from kubectl.
package alloc

import (
	"fmt"
	"net"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/kubernetes/pkg/registry/core/service/ipallocator"
	"k8s.io/kubernetes/pkg/registry/core/service/portallocator"
)

// Allocators hold the ClusterIP and NodePort allocations of one lab.
type Allocators struct {
	ips   *ipallocator.Range
	ports *portallocator.PortAllocator
}

// New builds the allocators for a Service CIDR and a NodePort range and marks what existing Services hold, as
// the apiserver's repair controllers do after a restart.
func New(serviceCIDR, nodePortRange string, existing []v1.Service) (*Allocators, error) {
	_, cidr, err := net.ParseCIDR(serviceCIDR)
	if err != nil {
		return nil, fmt.Errorf("service CIDR %q: %w", serviceCIDR, err)
	}
	pr, err := ParsePortRange(nodePortRange)
	if err != nil {
		return nil, err
	}
	ips, err := ipallocator.NewInMemory(cidr)
	if err != nil {
		return nil, err
	}
	ports, err := portallocator.NewInMemory(*pr)
	if err != nil {
		return nil, err
	}
	a := &Allocators{ips: ips, ports: ports}
	for _, svc := range existing {
		if ip := net.ParseIP(svc.Spec.ClusterIP); ip != nil {
			if err := ips.Allocate(ip); err != nil {
				return nil, fmt.Errorf("service %s/%s: clusterIP %s: %w", svc.Namespace, svc.Name, ip, err)
			}
		}
		for _, p := range svc.Spec.Ports {
			if p.NodePort != 0 {
				if err := ports.Allocate(int(p.NodePort)); err != nil {
					return nil, fmt.Errorf("service %s/%s: nodePort %d: %w", svc.Namespace, svc.Name, p.NodePort, err)
				}
			}
		}
	}
	return a, nil
}

// ParsePortRange parses a --service-node-port-range value ("30000-32767") as the apiserver does.
func ParsePortRange(s string) (*utilnet.PortRange, error) {
	pr, err := utilnet.ParsePortRange(s)
	if err != nil {
		return nil, fmt.Errorf("invalid --service-node-port-range %q: %w", s, err)
	}
	return pr, nil
}

// Allocate fills in the ClusterIP and, for NodePort Services, the NodePorts of a new Service. Explicit values
// are checked and reserved. On error nothing stays allocated.
func (a *Allocators) Allocate(svc *v1.Service) error {
	var undo []func()
	fail := func(el field.ErrorList) error {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
		return apierrors.NewInvalid(schema.GroupKind{Kind: "Service"}, svc.Name, el)
	}

	if svc.Spec.ClusterIP == "" {
		ip, err := a.ips.AllocateNext()
		if err != nil {
			return fail(field.ErrorList{field.Invalid(field.NewPath("spec", "clusterIPs"), svc.Spec.ClusterIPs, fmt.Sprintf("failed to allocate IP: %v", err))})
		}
		undo = append(undo, func() { a.ips.Release(ip) })
		svc.Spec.ClusterIP = ip.String()
	} else if svc.Spec.ClusterIP != v1.ClusterIPNone {
		ip := net.ParseIP(svc.Spec.ClusterIP)
		if ip == nil {
			return fail(field.ErrorList{field.Invalid(field.NewPath("spec", "clusterIP"), svc.Spec.ClusterIP, "must be a valid IP address")})
		}
		if err := a.ips.Allocate(ip); err != nil {
			return fail(field.ErrorList{field.Invalid(field.NewPath("spec", "clusterIPs"), svc.Spec.ClusterIPs, fmt.Sprintf("failed to allocate IP %v: %v", ip, err))})
		}
		undo = append(undo, func() { a.ips.Release(ip) })
	}
	svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}

	if svc.Spec.Type != v1.ServiceTypeNodePort && svc.Spec.Type != v1.ServiceTypeLoadBalancer {
		return nil
	}
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		path := field.NewPath("spec", "ports").Index(i).Child("nodePort")
		if p.NodePort != 0 {
			np := int(p.NodePort)
			if err := a.ports.Allocate(np); err != nil {
				return fail(field.ErrorList{field.Invalid(path, p.NodePort, err.Error())})
			}
			undo = append(undo, func() { a.ports.Release(np) })
			continue
		}
		np, err := a.ports.AllocateNext()
		if err != nil {
			fail(nil)
			return apierrors.NewInternalError(fmt.Errorf("failed to allocate a nodePort: %w", err))
		}
		undo = append(undo, func() { a.ports.Release(np) })
		p.NodePort = int32(np)
	}
	return nil
}
