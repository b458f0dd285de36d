package ebpf

import "strings"

// ServiceFlags is lb4_service.flags | flags2<<8, the combination Cilium's pkg/loadbalancer ServiceFlags uses,
// so String prints exactly what `cilium-dbg bpf lb list` prints in its [...] column.
type ServiceFlags uint16

// flags (SVC_FLAG_* in bpf/lib/lb.h).
const (
	FlagExternalIPs     ServiceFlags = 1 << 0 // SVC_FLAG_EXTERNAL_IP
	FlagNodePort        ServiceFlags = 1 << 1 // SVC_FLAG_NODEPORT
	FlagExtLocalScope   ServiceFlags = 1 << 2 // SVC_FLAG_EXT_LOCAL_SCOPE: externalTrafficPolicy=Local
	FlagHostPort        ServiceFlags = 1 << 3 // SVC_FLAG_HOSTPORT
	FlagSessionAffinity ServiceFlags = 1 << 4 // SVC_FLAG_AFFINITY: sessionAffinity=ClientIP
	FlagLoadBalancer    ServiceFlags = 1 << 5 // SVC_FLAG_LOADBALANCER
	FlagRoutable        ServiceFlags = 1 << 6 // SVC_FLAG_ROUTABLE: reachable from outside the node
	FlagSourceRange     ServiceFlags = 1 << 7 // SVC_FLAG_SOURCE_RANGE: loadBalancerSourceRanges check
)

// flags2, shifted by 8.
const (
	FlagLocalRedirect   ServiceFlags = 1 << 8  // SVC_FLAG_LOCALREDIRECT
	FlagNat46x64        ServiceFlags = 1 << 9  // SVC_FLAG_NAT_46X64
	FlagL7LoadBalancer  ServiceFlags = 1 << 10 // SVC_FLAG_L7_LOADBALANCER
	FlagLoopback        ServiceFlags = 1 << 11 // SVC_FLAG_LOOPBACK (HostPort) / SVC_FLAG_L7_DELEGATE (others)
	FlagIntLocalScope   ServiceFlags = 1 << 12 // SVC_FLAG_INT_LOCAL_SCOPE: internalTrafficPolicy=Local
	FlagTwoScopes       ServiceFlags = 1 << 13 // SVC_FLAG_TWO_SCOPES
	FlagQuarantined     ServiceFlags = 1 << 14 // SVC_FLAG_QUARANTINED on backend slots ...
	FlagSourceRangeDeny ServiceFlags = 1 << 14 // ... SVC_FLAG_SOURCE_RANGE_DENY on the frontend (slot 0)
	FlagFwdModeDSR      ServiceFlags = 1 << 15 // SVC_FLAG_FWD_MODE_DSR
)

// Type is the Service type the flags encode, with Cilium's names.
func (f ServiceFlags) Type() string {
	switch {
	case f&FlagExternalIPs != 0:
		return "ExternalIPs"
	case f&FlagNodePort != 0:
		return "NodePort"
	case f&FlagLoadBalancer != 0:
		return "LoadBalancer"
	case f&FlagHostPort != 0:
		return "HostPort"
	case f&FlagLocalRedirect != 0:
		return "LocalRedirect"
	}
	return "ClusterIP"
}

// External is lb4_svc_is_external: NodePort, LoadBalancer and external IPs.
func (f ServiceFlags) External() bool {
	return f&(FlagExternalIPs|FlagLoadBalancer|FlagNodePort) != 0
}

// String mirrors pkg/loadbalancer ServiceFlags.String() of Cilium v1.20.2 word for word.
func (f ServiceFlags) String() string {
	s := []string{f.Type()}
	seenDeny := false
	if f&FlagExtLocalScope != 0 {
		s = append(s, "Local")
	}
	if f&FlagIntLocalScope != 0 {
		s = append(s, "InternalLocal")
	}
	if f&FlagTwoScopes != 0 {
		s = append(s, "two-scopes")
	}
	if f&FlagSessionAffinity != 0 {
		s = append(s, "sessionAffinity")
	}
	if f&FlagRoutable == 0 {
		s = append(s, "non-routable")
	}
	if f&FlagSourceRange != 0 {
		s = append(s, "check source-range")
		if f&FlagSourceRangeDeny != 0 {
			seenDeny = true
			s = append(s, "deny")
		}
	}
	if f&FlagNat46x64 != 0 {
		s = append(s, "46x64")
	}
	if f&FlagL7LoadBalancer != 0 {
		s = append(s, "l7-load-balancer")
	}
	if f&FlagLoopback != 0 {
		if f.Type() == "HostPort" {
			s = append(s, "loopback")
		} else {
			s = append(s, "delegate-if-local")
		}
	}
	if !seenDeny && f&FlagQuarantined != 0 {
		s = append(s, "quarantined")
	}
	if f&FlagFwdModeDSR != 0 {
		s = append(s, "dsr")
	}
	return strings.Join(s, ", ")
}

// Load-balancing algorithms (LB_SELECTION_* in bpf/include/bpf/lb_selection.h).
const (
	AlgRandom = 1
	AlgMaglev = 2
	AlgFirst  = 3 // unit tests only
	AlgCustom = 0x80
)

// AlgName names an algorithm.
func AlgName(a uint8) string {
	switch a {
	case AlgRandom:
		return "random"
	case AlgMaglev:
		return "maglev"
	case AlgFirst:
		return "first"
	case 0:
		return "undef"
	}
	if a&AlgCustom != 0 {
		return "custom"
	}
	return "unknown"
}
