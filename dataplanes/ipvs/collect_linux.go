package ipvs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	libipvs "github.com/moby/ipvs"

	"github.com/k8sguide/k8sguide/dataplanes"
)

// svcPersistent is IP_VS_SVC_F_PERSISTENT (include/uapi/linux/ip_vs.h).
const svcPersistent = 0x1

// procConnections is the kernel's table of IPVS connection entries.
const procConnections = "/proc/net/ip_vs_conn"

// Collect reads the IPVS table, where the kernel has IPVS (its absence is not missing: most nodes have none).
func (Engine) Collect(_ context.Context, _ dataplanes.CollectOptions) (dataplanes.Part, error) {
	st, err := Collect()
	switch {
	case errors.Is(err, ErrNoIPVS), err == nil && st == nil:
		return dataplanes.Part{}, nil
	case err != nil:
		return dataplanes.Part{}, fmt.Errorf("IPVS table: %v", err)
	}
	data, err := json.Marshal(st)
	return dataplanes.Part{Data: data}, err
}

// ErrNoIPVS says the namespace's kernel has no IPVS: there is nothing to collect.
var ErrNoIPVS = errors.New("no IPVS in this kernel")

// Collect reads the IPVS table of the calling thread's network namespace over netlink (services and real
// servers, with their counters) and its connection entries. It returns (nil, nil) when IPVS is there but has
// no virtual servers and no connections, and ErrNoIPVS when the kernel has no IPVS.
func Collect() (*State, error) {
	if err := CheckKernel(); err != nil {
		return nil, ErrNoIPVS
	}
	h, err := libipvs.New("")
	if err != nil {
		return nil, fmt.Errorf("IPVS netlink: %w", err)
	}
	defer h.Close()
	services, err := h.GetServices()
	if err != nil {
		return nil, fmt.Errorf("IPVS services: %w", err)
	}
	st := &State{}
	for _, s := range services {
		v := VirtualServer{
			Protocol:    protocolName(s.Protocol),
			Address:     addr(s.Address),
			Port:        s.Port,
			FWMark:      s.FWMark,
			Scheduler:   s.SchedName,
			Persistent:  s.Flags&svcPersistent != 0,
			Connections: s.Stats.Connections,
		}
		if v.Persistent {
			v.Timeout = s.Timeout
		}
		dests, err := h.GetDestinations(s)
		if err != nil {
			return nil, fmt.Errorf("IPVS real servers of %s: %w", v.Name(), err)
		}
		for _, d := range dests {
			v.RealServers = append(v.RealServers, RealServer{
				Address:     addr(d.Address),
				Port:        d.Port,
				Forward:     forwardName(d.ConnectionFlags),
				Weight:      d.Weight,
				ActiveConns: d.ActiveConnections,
				InactConns:  d.InactiveConnections,
				Connections: d.Stats.Connections,
			})
		}
		st.Services = append(st.Services, v)
	}
	conns, err := os.ReadFile(procConnections)
	if err != nil {
		return nil, fmt.Errorf("IPVS connections: %w", err)
	}
	if st.Connections, err = ParseConnections(string(conns)); err != nil {
		return nil, err
	}
	if len(st.Services) == 0 && len(st.Connections) == 0 {
		return nil, nil
	}
	return st, nil
}

func addr(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

func protocolName(p uint16) string {
	switch p {
	case 6:
		return "TCP"
	case 17:
		return "UDP"
	case 132:
		return "SCTP"
	}
	return fmt.Sprintf("proto-%d", p)
}

// forwardName is ipvsadm's name for a destination's forwarding method.
func forwardName(flags uint32) string {
	switch flags & libipvs.ConnectionFlagFwdMask {
	case libipvs.ConnectionFlagMasq:
		return "Masq"
	case libipvs.ConnectionFlagLocalNode:
		return "Local"
	case libipvs.ConnectionFlagTunnel:
		return "Tunnel"
	case libipvs.ConnectionFlagDirectRoute:
		return "Route"
	}
	return fmt.Sprintf("forward-%d", flags&libipvs.ConnectionFlagFwdMask)
}
