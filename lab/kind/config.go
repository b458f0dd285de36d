// Package kind is the lab provider for hosts with a Docker engine: a real kind cluster (one control-plane node and
// N workers), with kube-proxy in the chosen mode or Cilium as the kube-proxy replacement, driven through kind's Go
// library and client-go.
package kind

import (
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/engines"
	"github.com/k8sguide/k8sguide/lab"
)

// NodeImages are the kind node images of kind v0.33.0's release notes, by digest. The default is Kubernetes
// 1.36, not kind's own default (1.37): the lab's library proxiers, client-go and Cilium 1.20's tested range are 1.36.
var NodeImages = map[string]string{
	"1.36.4": "kindest/node:v1.36.4@sha256:099e049362a1526b2db71494e1947aae99bd16290d7c895f2b7ea312e3cbfaed",
	"1.37.0": "kindest/node:v1.37.0@sha256:a1ed56cfb0e7b93589bdf97c8cd566405a265939e3620fc4f5de89adff580ae5",
}

// DefaultKubernetesVersion is the Kubernetes version of the default node image.
const DefaultKubernetesVersion = "1.36.4"

// DataplaneLabel is set on every node of a k8sguide kind cluster; Status reads the dataplane back from it.
const DataplaneLabel = "k8sguide.dev/dataplane"

var imageVersion = regexp.MustCompile(`:v(\d+\.\d+\.\d+)(@sha256:[0-9a-f]{64})?$`)

// NodeImage picks the node image for --image or --kubernetes-version (at most one is given). A version with no
// pinned image becomes kindest/node:vX.Y.Z by tag, and the second result says so.
func NodeImage(image, kubernetesVersion string) (string, *version.Version, string, error) {
	if image != "" && kubernetesVersion != "" {
		return "", nil, "", fmt.Errorf("--image and --kubernetes-version: give one or the other")
	}
	if image == "" {
		v := strings.TrimPrefix(kubernetesVersion, "v")
		if v == "" {
			v = DefaultKubernetesVersion
		}
		if img, ok := NodeImages[v]; ok {
			image = img
		} else {
			// "1.36" means the pinned 1.36 patch release.
			for full, img := range NodeImages {
				if strings.HasPrefix(full, v+".") {
					image = img
				}
			}
		}
		if image == "" {
			sv, err := version.ParseSemantic(v)
			if err != nil {
				return "", nil, "", fmt.Errorf("--kubernetes-version %q: want a version like 1.36.4", kubernetesVersion)
			}
			return "kindest/node:v" + sv.String(), sv, fmt.Sprintf("kindest/node:v%s is not one of the node images pinned by digest (%s); it is pulled by tag", sv, pinnedVersions()), nil
		}
	}
	m := imageVersion.FindStringSubmatch(image)
	if m == nil {
		return "", nil, "", fmt.Errorf("--image %q: want a kind node image tagged with its Kubernetes version, like kindest/node:v1.36.4", image)
	}
	return image, version.MustParseSemantic(m[1]), "", nil
}

func pinnedVersions() string {
	var vs []string
	for v := range NodeImages {
		vs = append(vs, v)
	}
	if len(vs) == 2 && vs[0] > vs[1] {
		vs[0], vs[1] = vs[1], vs[0]
	}
	return strings.Join(vs, ", ")
}

// ProxyMode is kind's kubeProxyMode for a dataplane, from its lab face: kube-proxy's mode, or none where the
// dataplane's agent replaces kube-proxy (Cilium, the one agent this provider installs).
func ProxyMode(d dataplanes.Name) (v1alpha4.ProxyMode, error) {
	face, ok := engines.Lab(d)
	switch {
	case !ok:
		return "", fmt.Errorf("unknown dataplane %q", d)
	case face.Agent == dataplanes.AgentCilium:
		return "none", nil
	case face.ReplacesKubeProxy():
		return "", fmt.Errorf("the kind provider cannot install the %s agent of the %s dataplane", face.Agent, d)
	}
	return v1alpha4.ProxyMode(face.KubeProxyMode), nil
}

// ClusterConfig is the v1alpha4 config `up` hands kind: 1 control-plane + N workers on the node image, kube-proxy
// in the dataplane's mode (or none, and no kindnet, for Cilium), and the lab's kube-proxy and apiserver settings
// as kubeadm config patches.
func ClusterConfig(cfg lab.Config, image string) (*v1alpha4.Cluster, error) {
	mode, err := ProxyMode(cfg.Dataplane)
	if err != nil {
		return nil, err
	}
	c := &v1alpha4.Cluster{
		TypeMeta: v1alpha4.TypeMeta{Kind: "Cluster", APIVersion: "kind.x-k8s.io/v1alpha4"},
		Name:     cfg.Name,
		Networking: v1alpha4.Networking{
			PodSubnet:         lab.PodSubnet,
			ServiceSubnet:     lab.ServiceSubnet,
			KubeProxyMode:     mode,
			DisableDefaultCNI: lab.RunsCilium(cfg.Dataplane),
		},
	}
	labels := map[string]string{DataplaneLabel: string(cfg.Dataplane)}
	c.Nodes = append(c.Nodes, v1alpha4.Node{Role: v1alpha4.ControlPlaneRole, Image: image, Labels: labels})
	for i := 0; i < cfg.Workers; i++ {
		c.Nodes = append(c.Nodes, v1alpha4.Node{Role: v1alpha4.WorkerRole, Image: image, Labels: labels})
	}
	if len(cfg.NodePortAddresses) > 0 {
		// kube-proxy's own config, which kind renders as a KubeProxyConfiguration document: a merge patch adds
		// the field.
		c.KubeadmConfigPatches = append(c.KubeadmConfigPatches, fmt.Sprintf(
			"apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nnodePortAddresses: [%s]\n",
			quoteList(cfg.NodePortAddresses)))
	}
	if cfg.NodePortRange != "" && cfg.NodePortRange != lab.DefaultNodePortRange {
		// No apiVersion: kind then matches the ClusterConfiguration of whichever kubeadm API the node image
		// uses, and merges extraArgs by name into v1beta4's list (kind's kubeadm_merge.go), keeping its own.
		c.KubeadmConfigPatches = append(c.KubeadmConfigPatches, fmt.Sprintf(
			"kind: ClusterConfiguration\napiServer:\n  extraArgs:\n    service-node-port-range: %q\n", cfg.NodePortRange))
	}
	return c, nil
}

// CgroupV1Patch lets kubelet run on a cgroup v1 host: from Kubernetes 1.35 it refuses to start there unless
// told otherwise (failCgroupV1), and kind only warns. No apiVersion: kind patches its KubeletConfiguration
// whatever the version.
const CgroupV1Patch = "kind: KubeletConfiguration\nfailCgroupV1: false\n"

func quoteList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}
