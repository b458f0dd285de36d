package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/cilium/cilium/pkg/bpf"
	"github.com/cilium/cilium/pkg/datapath/config"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// The socket LB, as Cilium's socketlb.Enable loads it: bpf_sock with the node's load-time constants, its
// cgroup programs attached to the cgroup root (here the node's own cgroup, which every process of the node runs
// in) and their links pinned. The IPv4 set Cilium attaches with kube-proxy replacement on an IPv4 node:
// connect4, sendmsg4 and recvmsg4 (the translation and its reverse for UDP), post_bind4 (NodePort bind
// protection) and sock_release (which drops a socket's reverse-NAT entry). Built with
// ENABLE_SOCKET_LB_HOST_ONLY, the programs translate the node's own sockets only.

// sockPrograms are the programs attached, with their attach types.
var sockPrograms = []struct {
	name   string
	attach ebpf.AttachType
}{
	{"cil_sock4_connect", ebpf.AttachCGroupInet4Connect},
	{"cil_sock4_sendmsg", ebpf.AttachCGroupUDP4Sendmsg},
	{"cil_sock4_recvmsg", ebpf.AttachCGroupUDP4Recvmsg},
	{"cil_sock4_post_bind", ebpf.AttachCGroupInet4PostBind},
	{"cil_sock_release", ebpf.AttachCgroupInetSockRelease},
}

// loadSock loads bpf_sock and attaches it to the node's cgroup, replacing an earlier run's links.
func (d *datapath) loadSock(logger *slog.Logger, o options) error {
	spec, err := ebpf.LoadCollectionSpec(o.sockObject)
	if err != nil {
		return fmt.Errorf("reading %s: %w", o.sockObject, err)
	}
	cfg := config.NewBPFSock(d.node)
	cfg.EnableNoServiceEndpointsRoutable = true
	coll, commit, err := bpf.LoadCollection(logger, spec, &bpf.CollectionOptions{
		CollectionOptions: ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: globalsDir(o.bpffs)}},
		Constants:         cfg,
	})
	if err != nil {
		return fmt.Errorf("loading bpf_sock: %w", err)
	}
	defer coll.Close()
	// Where Cilium pins them (bpffs/cilium/socketlb/links/cgroup), so that the collector finds them on a lab
	// node as on a Cilium node.
	dir := filepath.Join(o.bpffs, "cilium", "socketlb", "links", "cgroup")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, p := range sockPrograms {
		prog := coll.Programs[p.name]
		if prog == nil {
			return fmt.Errorf("%s has no program %s: was it compiled from Cilium's bpf_sock.c?", o.sockObject, p.name)
		}
		pin := filepath.Join(dir, p.name)
		if err := os.Remove(pin); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		l, err := link.AttachCgroup(link.CgroupOptions{Path: o.cgroupRoot, Attach: p.attach, Program: prog})
		if err != nil {
			return fmt.Errorf("attaching %s to the cgroup %s: %w", p.name, o.cgroupRoot, err)
		}
		d.links = append(d.links, l)
		if err := l.Pin(pin); err != nil {
			return fmt.Errorf("pinning the %s link: %w", p.name, err)
		}
	}
	if err := commit(); err != nil {
		return fmt.Errorf("committing bpf pins: %w", err)
	}
	return nil
}
