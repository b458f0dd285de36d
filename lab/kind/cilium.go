package kind

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"sigs.k8s.io/kind/pkg/cluster/nodes"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf/datapath"
)

// CiliumSource says where the ebpf dataplane's Cilium comes from on kind, and what the nodes lack for it.
type CiliumSource struct {
	// Local is true when the engine holds the images `make cilium-images` built from Cilium's source: then the
	// chart comes from the same source (the Cilium module) and the images are loaded into the nodes, as
	// Cilium's kind guide does with `kind load docker-image`, and no registry is asked. Otherwise Cilium's
	// published chart and images (quay.io).
	Local bool
	// Images are the local images' references (Local only).
	Images []string
	// WithoutCapabilities are capabilities the chart gives Cilium's containers that the nodes cannot grant (see
	// missingCapabilities); the chart is installed without them.
	WithoutCapabilities []string
	// SharedCgroupNamespace is true when the nodes share one cgroup namespace (an engine that does not give each
	// container its own): Cilium's socket LB attaches to the root of the cgroup v2 hierarchy it sees, which would
	// then be every node's, and the host's; the chart is installed with the socket LB off.
	SharedCgroupNamespace bool
}

func (s CiliumSource) String() string {
	if s.Local {
		return "Cilium " + datapath.CiliumVersion + " built from source (make cilium-images)"
	}
	return "Cilium " + datapath.CiliumVersion + " from quay.io"
}

// FindCiliumSource picks the Cilium a kind lab installs: the local images when the engine holds both.
func FindCiliumSource(ctx context.Context, r Runtime) (CiliumSource, error) {
	agent, operator := datapath.LocalImages()
	for _, ref := range []string{agent, operator} {
		ok, err := r.HasImage(ctx, ref)
		if err != nil {
			return CiliumSource{}, err
		}
		if !ok {
			return CiliumSource{}, nil
		}
	}
	return CiliumSource{Local: true, Images: []string{agent, operator}}, nil
}

// capSysResource is CAP_SYS_RESOURCE's number (linux/capability.h).
const capSysResource = 24

// missingCapabilities names the capabilities the chart gives Cilium's containers that a node's bounding set
// lacks. Found on these machines: every process lacks CAP_SYS_RESOURCE, so containerd in a node cannot start a
// container that asks for it (runc: "unable to apply caps"), and the chart's agent and clean-state containers
// do. Cilium needs it for RLIMIT_MEMLOCK on kernels before 5.11 (the chart says so); later kernels charge eBPF
// memory to the cgroup instead.
func missingCapabilities(ctx context.Context, n nodes.Node) ([]string, error) {
	status, err := output(ctx, n, nil, "cat", "/proc/1/status")
	if err != nil {
		return nil, fmt.Errorf("node %s: reading its capabilities: %w", n, err)
	}
	for _, line := range strings.Split(status, "\n") {
		if hex, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			if err != nil {
				return nil, fmt.Errorf("node %s: CapBnd %q: %w", n, hex, err)
			}
			if mask&(1<<capSysResource) == 0 {
				return []string{"SYS_RESOURCE"}, nil
			}
			return nil, nil
		}
	}
	return nil, fmt.Errorf("node %s: no CapBnd in /proc/1/status", n)
}

// prepareCilium readies the nodes for Cilium: its images loaded when they are local. It records in src what the
// nodes lack.
func (p *Provider) prepareCilium(ctx context.Context, ns []nodes.Node, src *CiliumSource, progress io.Writer) error {
	if len(ns) > 0 {
		missing, err := missingCapabilities(ctx, ns[0])
		if err != nil {
			return err
		}
		if len(missing) > 0 {
			fmt.Fprintf(progress, "Note: the nodes cannot grant %s (this host's bounding set lacks it): Cilium's containers\n", strings.Join(missing, ", "))
			fmt.Fprintln(progress, "      run without it, which Cilium needs on kernels before 5.11 only.")
			src.WithoutCapabilities = missing
		}
	}
	// Cilium's kind guide: each node must run in a cgroup namespace of its own (kind asks Docker for private
	// ones; Docker on a cgroup v2 host, and on these cgroup v1 machines, gives them).
	seen := map[string]string{}
	for _, n := range ns {
		id, err := output(ctx, n, nil, "readlink", "/proc/1/ns/cgroup")
		if err != nil {
			return fmt.Errorf("node %s: reading its cgroup namespace: %w", n, err)
		}
		id = strings.TrimSpace(id)
		if other, ok := seen[id]; ok {
			fmt.Fprintf(progress, "Note: %s and %s share one cgroup namespace (%s).\n", other, n, id)
			fmt.Fprintln(progress, "      Cilium's socket LB would attach to its root and translate every node's connections with")
			fmt.Fprintln(progress, "      one node's maps: it is off, and pods' Services are balanced per packet in bpf_lxc (Cilium's")
			fmt.Fprintln(progress, "      kind guide asks for private cgroup namespaces).")
			src.SharedCgroupNamespace = true
			break
		}
		seen[id] = n.String()
	}
	if src.Local {
		fmt.Fprintf(progress, "Loading %s into the nodes ...\n", strings.Join(src.Images, " and "))
		if err := p.Runtime.LoadImages(ctx, ns, src.Images); err != nil {
			return fmt.Errorf("loading Cilium's images into the nodes: %w", err)
		}
	}
	return nil
}
