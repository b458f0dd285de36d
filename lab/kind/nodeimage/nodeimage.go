// Package nodeimage builds k8sguide's offline kind node image: a kind node image for Kubernetes v1.36.4 made with
// no container registry at all, from Debian's packages and Go modules, through kind's own `build node-image`
// (sigs.k8s.io/kind/pkg/build/nodeimage), for machines and classrooms without the internet and for this
// project's own tests (these machines reach the Go module proxy and Debian, not a registry).
//
// What goes in, and where each part comes from:
//   - the node's base (kind's base image, remade): debootstrap of Debian bookworm with the packages kind's base
//     Dockerfile installs (systemd, iptables, nftables, conntrack, iproute2, ...), Debian's containerd 1.6 and
//     runc in the place of kind's own builds, Debian's CNI plugins, kind's base files from kind's module, crictl
//     from cri-tools' module (tools/crictl), and a ctr shim for what containerd 1.6's ctr lacks (files/ctr);
//   - the Kubernetes binaries: go build of k8s.io/kubernetes/cmd/... at the version the project requires (its
//     go.mod lists them as tools), with the project's build flags, so that they share its build cache;
//   - every image the cluster and the lessons use, made on the engine from local files (a registry is never
//     asked): kube-apiserver, kube-controller-manager, kube-scheduler, etcd (etcd's server main, cmd/etcd) and
//     CoreDNS (tools/coredns) on a distroless-like base; kube-proxy and the pod network (podnet, in the place of
//     kindnetd, whose source the module proxy does not serve) on Debian with iptables, nftables, ipset and
//     conntrack, behind an iptables wrapper as Kubernetes' images have; pause from Kubernetes' own pause.c;
//     nginx:1.22.1 (the lessons' web) as Debian's nginx 1.22.1, laid out as the official image.
//
// Cached under ~/.cache/k8sguide/kind-image/: the two Debian trees (as tars), the binaries and the images'
// archives (kind's release-tarball shape), each keyed by what it is made of, so a version change rebuilds.
package nodeimage

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"strings"

	kubeadmv1beta4 "k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm/v1beta4"
	kubeadmconstants "k8s.io/kubernetes/cmd/kubeadm/app/constants"
)

// Recipe changes when what goes into the image changes in a way its inputs' hashes do not show.
const Recipe = "1"

// KubernetesVersion is the image's Kubernetes: the version of k8s.io/kubernetes the project requires.
const KubernetesVersion = "v1.36.4"

// Repository is the image's name without its tag; the tag is the Kubernetes version, as kindest/node's.
const Repository = "k8sguide/kind-node"

// Name is the image's name: k8sguide/kind-node:v1.36.4 (`up --image` wants a tag carrying the version).
func Name() string { return Repository + ":" + KubernetesVersion }

// KeyLabel is the image label holding the key of what it was built from: an image with another key is rebuilt.
const KeyLabel = "dev.k8sguide.kind-image.key"

// Suite is the Debian release the trees come from (the machines' own).
const Suite = "bookworm"

// BasePackages are the node's packages: kind's base Dockerfile's list without what only kind's own storage and
// rootless e2e tests use (nfs-common, open-iscsi, fuse-overlayfs), plus what kind builds from source there:
// containerd, runc and the CNI plugins, here Debian's.
var BasePackages = []string{
	"systemd", "systemd-sysv", "conntrack", "iptables", "nftables", "iproute2", "ethtool", "util-linux", "mount",
	"kmod", "libseccomp2", "pigz", "e2fsprogs", "bash", "ca-certificates", "curl", "jq", "procps",
	"containerd", "runc", "containernetworking-plugins",
}

// UserlandPackages are the Debian tree under kube-proxy, podnet and nginx: what kube-proxy runs in each of its
// modes (iptables, nft, ipset, conntrack), and nginx.
var UserlandPackages = []string{"iptables", "nftables", "conntrack", "ipset", "kmod", "iproute2", "nginx-light", "ca-certificates"}

// NginxImage is the web image of the lessons: a pinned tag a user's machine can pull, and the offline image holds
// (Debian bookworm's nginx is 1.22.1, the same release).
const NginxImage = "docker.io/library/nginx:1.22.1"

// Images are the image references kubeadm v1.36 deploys, from kubeadm's own constants.
func Images() (apiserver, controllerManager, scheduler, proxy, etcd, coredns, pause string) {
	reg := kubeadmv1beta4.DefaultImageRepository
	return reg + "/kube-apiserver:" + KubernetesVersion,
		reg + "/kube-controller-manager:" + KubernetesVersion,
		reg + "/kube-scheduler:" + KubernetesVersion,
		reg + "/kube-proxy:" + KubernetesVersion,
		reg + "/etcd:" + kubeadmconstants.DefaultEtcdVersion,
		reg + "/coredns/" + kubeadmconstants.CoreDNSImageName + ":" + kubeadmconstants.CoreDNSVersion,
		reg + "/pause:" + kubeadmconstants.PauseVersion
}

//go:embed files
var files embed.FS

// file is one of the image's own files (files/).
func file(name string) []byte {
	data, err := files.ReadFile("files/" + name)
	if err != nil {
		panic(err) // embedded: cannot be missing
	}
	return data
}

// Key hashes what an artefact is made of: its name and inputs, in order.
func Key(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s\n", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// hashFS hashes every file of fsys (names and contents, in order).
func hashFS(fsys fs.FS) (string, error) {
	h := sha256.New()
	var names []string
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			names = append(names, p)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	for _, n := range names {
		f, err := fsys.Open(n)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\n", n)
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// selfFS is the build's own folder without its subfolders (the binaries' sources, hashed on their own) and its
// tests.
type selfFS struct{ fs.FS }

func (s selfFS) ReadDir(name string) ([]fs.DirEntry, error) {
	entries, err := fs.ReadDir(s.FS, name)
	if err != nil || name != "." {
		return entries, err
	}
	var out []fs.DirEntry
	for _, e := range entries {
		if (!e.IsDir() && !strings.HasSuffix(e.Name(), "_test.go")) || e.Name() == "files" {
			out = append(out, e)
		}
	}
	return out, nil
}

// About is what the image records about itself in the cluster (the ConfigMap kube-system/k8sguide-node-image).
func About(key string) string {
	return strings.Join([]string{
		"k8sguide offline kind node image " + Name() + " (key " + key + ")",
		"built with no registry from Debian " + Suite + " packages and Go modules, through kind's build node-image",
		"pod network: podnet (kindnet's CNI configuration, routes and masquerade; no NetworkPolicy)",
		"no storage provisioner: a PersistentVolumeClaim stays Pending",
	}, "; ")
}
