package app

import (
	"fmt"
	"runtime/debug"
	"strings"

	kindversion "sigs.k8s.io/kind/pkg/cmd/kind/version"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf/datapath"
	"github.com/k8sguide/k8sguide/lab/kind"
)

// versionText is what --version prints: k8sguide's own version (its module version, else the commit it was
// built from), and the versions of what its labs run, which a bug report needs as much.
func versionText() string {
	tool := "(unknown build)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		tool = toolVersion(bi)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "k8sguide %s\n", tool)
	fmt.Fprintf(&b, "Kubernetes v%s (the netns lab's control plane and kube-proxy; kind's node image)\n", kind.DefaultKubernetesVersion)
	fmt.Fprintf(&b, "Cilium %s (the ebpf dataplane)\n", datapath.CiliumVersion)
	fmt.Fprintf(&b, "kind v%s (the kind provider's library)\n", kindversion.Version())
	return b.String()
}

// toolVersion is the module's version when it was built as a dependency or from a tag, else the commit and
// whether the tree had changes, else "(devel)".
func toolVersion(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if v != "" && v != "(devel)" {
		return v + ", " + bi.GoVersion
	}
	if rev := settings["vcs.revision"]; rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if settings["vcs.modified"] == "true" {
			rev += " with local changes"
		}
		return fmt.Sprintf("(devel) commit %s, %s", rev, bi.GoVersion)
	}
	return "(devel), " + bi.GoVersion
}
