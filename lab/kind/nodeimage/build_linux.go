package nodeimage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"sigs.k8s.io/kind/pkg/build/nodeimage"
	"sigs.k8s.io/kind/pkg/log"

	"github.com/k8sguide/k8sguide/internal/privdir"
	"github.com/k8sguide/k8sguide/lab/kind/nodeimage/capability"
)

// Options say where the build reads and writes.
type Options struct {
	// ModuleRoot is the k8sguide checkout: the Go builds run there.
	ModuleRoot string
	// CacheDir keeps the expensive parts between builds (default ~/.cache/k8sguide/kind-image).
	CacheDir string
	// Mirror is the Debian mirror debootstrap uses (default: the machine's first apt source, else
	// deb.debian.org).
	Mirror string
	// Progress gets a line per step; kind's own build log goes to Logger.
	Progress io.Writer
	Logger   log.Logger
	// Rebuild ignores an image already in the engine.
	Rebuild bool
}

// Build makes the image and loads it into the engine DOCKER_HOST names, and returns its name. An image of that
// name whose key matches is kept as it is.
func Build(ctx context.Context, o Options) (string, error) {
	b, err := newBuilder(ctx, o)
	if err != nil {
		return "", err
	}
	defer b.cleanup()
	if !o.Rebuild {
		if key, err := b.docker(ctx, "image", "inspect", "--format", "{{index .Config.Labels \""+KeyLabel+"\"}}", Name()); err == nil && strings.TrimSpace(key) == b.key {
			b.say("%s is in the engine already (key %s)", Name(), b.key)
			return Name(), nil
		}
	}
	start := time.Now()
	// The Debian trees (network and disk) and the Go builds (CPU) at once.
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := b.tree(gctx, "base", b.baseKey, BasePackages, b.customizeBase); err != nil {
			return err
		}
		return b.tree(gctx, "userland", b.userlandKey, UserlandPackages, b.customizeUserland)
	})
	g.Go(func() error { return b.binaries(gctx) })
	if err := g.Wait(); err != nil {
		return "", err
	}
	release, err := b.release(ctx)
	if err != nil {
		return "", err
	}
	// kind's base image: the base tree, and crictl (built from Go, so not in the cached tree) on top. Without
	// kind's STOPSIGNAL SIGRTMIN+3, which docker import and commit cannot set: kind removes its nodes with
	// docker rm --force, never docker stop.
	tree := "k8sguide/kind-base-tree:" + b.baseKey
	if err := b.importTree(ctx, b.cached("base-"+b.baseKey+".tar"), tree,
		"ENV container=docker",
		"ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		`ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]`); err != nil {
		return "", err
	}
	b.cleanupImages = append(b.cleanupImages, tree)
	base := "k8sguide/kind-base:" + b.key
	if err := b.addBinary(ctx, tree, base, filepath.Join(b.binDir(), "crictl"), "/usr/local/bin/crictl", nil); err != nil {
		return "", err
	}
	b.cleanupImages = append(b.cleanupImages, base)
	built := "k8sguide/kind-node-build:" + b.key
	b.say("kind build node-image (base %s, Kubernetes from %s)", base, release)
	// kind extracts the Kubernetes tarball into os.TempDir() and never removes it (kind v0.33.0,
	// builder_tarball.go): 790 MB left in /tmp by every build. Its temporary files go in the work directory,
	// which cleanup removes however the build ends.
	restoreTmp := setenvFor("TMPDIR", b.work)
	err = nodeimage.Build(
		nodeimage.WithImage(built),
		nodeimage.WithBaseImage(base),
		nodeimage.WithKubeParam(release),
		nodeimage.WithBuildType("file"),
		nodeimage.WithArch(runtime.GOARCH),
		nodeimage.WithLogger(b.logger),
	)
	restoreTmp()
	if err != nil {
		return "", fmt.Errorf("kind build node-image: %w", err)
	}
	b.cleanupImages = append(b.cleanupImages, built)
	if err := b.finish(ctx, built); err != nil {
		return "", err
	}
	b.say("built %s in %s", Name(), time.Since(start).Round(time.Second))
	return Name(), nil
}

type builder struct {
	o                                    Options
	cache, work                          string
	key, baseKey, userlandKey, binaryKey string
	releaseKey                           string
	rawKeys                              map[string]string
	restrictOOM                          bool
	kindDir                              string
	logger                               log.Logger
	mu                                   sync.Mutex
	cleanupImages                        []string
}

func newBuilder(ctx context.Context, o Options) (*builder, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("building the node image needs root (debootstrap, chroot)")
	}
	for _, tool := range []string{"debootstrap", "docker", "go", "gcc", "tar", "chroot"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("no %s on PATH (make kind-image installs debootstrap, docker.io and gcc)", tool)
		}
	}
	b := &builder{o: o, logger: o.Logger}
	if b.logger == nil {
		b.logger = log.NoopLogger{}
	}
	if o.CacheDir == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			return nil, err
		}
		b.o.CacheDir = filepath.Join(dir, "k8sguide", "kind-image")
	}
	b.cache = b.o.CacheDir
	if b.o.Mirror == "" {
		b.o.Mirror = aptMirror()
	}
	if _, err := b.docker(ctx, "info", "--format", "{{.ServerVersion}}"); err != nil {
		return nil, fmt.Errorf("the node image is built on a Docker engine and none answers (DOCKER_HOST=%q): %v", os.Getenv("DOCKER_HOST"), err)
	}
	// The cache holds binaries and trees that go into every node image root runs: no one else's to write.
	if err := privdir.Ensure(b.cache); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "k8sguide-kind-image-")
	if err != nil {
		return nil, err
	}
	b.work = work
	kindDir, err := b.goOutput(ctx, b.o.ModuleRoot, "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kind")
	if err != nil {
		return nil, err
	}
	b.kindDir = kindDir
	// On machines whose processes lack CAP_SYS_RESOURCE (these: see internal/kindengine), containerd inside the
	// node cannot set a pod's oom_score_adj below its own, and every pod sandbox fails; restrict_oom_score_adj
	// makes containerd clamp it, as it does in rootless kind. Elsewhere the image keeps kind's setting.
	b.restrictOOM = !capability.Has("CAP_SYS_RESOURCE")
	goVersion, err := b.goOutput(ctx, b.o.ModuleRoot, "env", "GOVERSION")
	if err != nil {
		return nil, err
	}
	// The binaries' sources: the programs of this folder and the tools' modules (go.mod, go.sum, mains).
	var own []string
	for _, d := range []string{"cmd", "podnet", "tools"} {
		h, err := hashFS(os.DirFS(filepath.Join(b.o.ModuleRoot, "lab", "kind", "nodeimage", d)))
		if err != nil {
			return nil, err
		}
		own = append(own, h)
	}
	// The build's own code and files: a change to how the image is put together rebuilds what follows the
	// Debian downloads and the Go builds.
	recipe, err := hashFS(selfFS{os.DirFS(filepath.Join(b.o.ModuleRoot, "lab", "kind", "nodeimage"))})
	if err != nil {
		return nil, err
	}
	sum, err := os.ReadFile(filepath.Join(b.o.ModuleRoot, "go.sum"))
	if err != nil {
		return nil, err
	}
	kindFiles, err := hashFS(os.DirFS(filepath.Join(kindDir, "images", "base", "files")))
	if err != nil {
		return nil, err
	}
	b.rawKeys = map[string]string{
		"base":     Key("debootstrap", Suite, b.o.Mirror, strings.Join(BasePackages, ",")),
		"userland": Key("debootstrap", Suite, b.o.Mirror, strings.Join(UserlandPackages, ",")),
	}
	b.baseKey = Key("base", Recipe, b.rawKeys["base"], kindFiles, recipe, fmt.Sprint(b.restrictOOM))
	b.userlandKey = Key("userland", Recipe, b.rawKeys["userland"], recipe)
	b.binaryKey = Key("binaries", Recipe, KubernetesVersion, goVersion, string(sum), strings.Join(own, ","), runtime.GOARCH)
	b.releaseKey = Key("release", Recipe, b.userlandKey, b.binaryKey, recipe)
	b.key = Key("image", Recipe, b.baseKey, b.releaseKey, recipe)
	b.say("key %s (base %s, userland %s, binaries %s); cache %s", b.key, b.baseKey, b.userlandKey, b.binaryKey, b.cache)
	return b, nil
}

func (b *builder) say(format string, args ...any) {
	if b.o.Progress == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	fmt.Fprintf(b.o.Progress, "kind-image: "+format+"\n", args...)
}

func (b *builder) cached(name string) string { return filepath.Join(b.cache, name) }

// cleanup removes the build's temporary files and intermediate images.
func (b *builder) cleanup() {
	if b.work != "" {
		unmountUnder(b.work)
		os.RemoveAll(b.work)
	}
	if len(b.cleanupImages) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		b.docker(ctx, append([]string{"rmi", "--force"}, b.cleanupImages...)...)
	}
}

// tree makes the Debian tree name (debootstrap of packages, then customize) unless the cache holds it as a tar.
// debootstrap's own result is cached too (the slow part, downloads included): a change to customize redoes only
// what follows it.
func (b *builder) tree(ctx context.Context, name, key string, packages []string, customize func(context.Context, string) error) error {
	out := b.cached(name + "-" + key + ".tar")
	if _, err := os.Stat(out); err == nil {
		b.say("%s tree: cached (%s)", name, out)
		return nil
	}
	start := time.Now()
	dir := filepath.Join(b.work, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	raw := b.cached("debootstrap-" + name + "-" + b.rawKeys[name] + ".tar")
	if _, err := os.Stat(raw); err == nil {
		b.say("%s tree: debootstrap's result cached (%s)", name, raw)
		if err := b.run(ctx, nil, "tar", "--numeric-owner", "--xattrs", "-C", dir, "-xf", raw); err != nil {
			return err
		}
	} else {
		debs := b.cached("debs")
		if err := os.MkdirAll(debs, 0o755); err != nil {
			return err
		}
		b.say("%s tree: debootstrap %s (%s) from %s", name, Suite, strings.Join(packages, " "), b.o.Mirror)
		err := b.run(ctx, nil, "debootstrap", "--variant=minbase", "--include="+strings.Join(packages, ","),
			"--cache-dir="+debs, Suite, dir, b.o.Mirror)
		// debootstrap mounts /proc and /sys in the tree while it runs, and leaves them when it fails.
		unmountUnder(dir)
		if err != nil {
			return fmt.Errorf("debootstrap of the %s tree: %w", name, err)
		}
		if err := b.run(ctx, nil, "tar", "--numeric-owner", "--xattrs", "-C", dir, "-cf", raw+".part", "."); err != nil {
			return err
		}
		if err := os.Rename(raw+".part", raw); err != nil {
			return err
		}
		b.keepOnly("debootstrap-"+name+"-", raw)
	}
	if err := customize(ctx, dir); err != nil {
		return fmt.Errorf("the %s tree: %w", name, err)
	}
	// Debian's package lists and the .deb files debootstrap leaves: not part of an image.
	for _, d := range []string{"var/lib/apt/lists", "var/cache/apt/archives", "var/log/apt"} {
		clearDir(filepath.Join(dir, d))
	}
	for _, f := range []string{"var/log/dpkg.log", "var/log/bootstrap.log", "var/log/alternatives.log"} {
		os.Remove(filepath.Join(dir, f))
	}
	if err := b.run(ctx, nil, "tar", "--numeric-owner", "--xattrs", "-C", dir, "-cf", out+".part", "."); err != nil {
		return err
	}
	if err := os.Rename(out+".part", out); err != nil {
		return err
	}
	b.keepOnly(name+"-", out)
	b.say("%s tree: made in %s", name, time.Since(start).Round(time.Second))
	return os.RemoveAll(dir)
}

// keepOnly removes the cache's other artefacts of one kind (named prefix*), so that the cache holds one of each.
func (b *builder) keepOnly(prefix, keep string) {
	matches, _ := filepath.Glob(filepath.Join(b.cache, prefix+"*"))
	for _, m := range matches {
		if m != keep && !strings.HasSuffix(m, ".part") {
			os.RemoveAll(m)
		}
	}
}

// customizeBase does what kind's base Dockerfile does to its Debian image, with Debian's containerd, runc and
// CNI plugins in the place of kind's builds.
func (b *builder) customizeBase(ctx context.Context, dir string) error {
	kindFiles := filepath.Join(b.kindDir, "images", "base", "files")
	// COPY files/... with kind's modes: scripts 0755, the rest 0644.
	copies := []struct {
		from, to string
		mode     os.FileMode
	}{
		{"usr/local/bin", "usr/local/bin", 0o755},
		{"kind", "kind", 0o644},
		{"kind/bin", "kind/bin", 0o755},
		{"LICENSES", "LICENSES", 0o644},
		{"etc", "etc", 0o644},
		{"etc/containerd", "etc/containerd", 0o644},
		{"etc/default", "etc/default", 0o644},
		{"etc/sysctl.d", "etc/sysctl.d", 0o644},
		{"etc/systemd/system", "etc/systemd/system", 0o644},
		{"etc/systemd/system/kubelet.service.d", "etc/systemd/system/kubelet.service.d", 0o644},
	}
	for _, c := range copies {
		if err := copyFiles(filepath.Join(kindFiles, c.from), filepath.Join(dir, c.to), c.mode); err != nil {
			return err
		}
	}
	for _, d := range []string{"kind", "kind/bin", "etc/kubernetes/manifests", "opt/cni/bin", "kind/offline"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
		os.Chmod(filepath.Join(dir, d), 0o755)
	}
	// The Dockerfile's clean-up of systemd units that make no sense in a container.
	for _, pattern := range []string{
		"lib/systemd/system/sysinit.target.wants/systemd-tmpfiles-setup.service",
		"lib/systemd/system/multi-user.target.wants/*",
		"etc/systemd/system/*.wants/*",
		"lib/systemd/system/local-fs.target.wants/*",
		"lib/systemd/system/sockets.target.wants/*udev*",
		"lib/systemd/system/sockets.target.wants/*initctl*",
		"lib/systemd/system/basic.target.wants/*",
	} {
		matches, _ := filepath.Glob(filepath.Join(dir, pattern))
		for _, m := range matches {
			os.Remove(m)
		}
	}
	if err := appendFile(filepath.Join(dir, "etc/systemd/journald.conf"), "ReadKMsg=no\n"); err != nil {
		return err
	}
	if err := symlink("/usr/lib/systemd/systemd", filepath.Join(dir, "sbin/init")); err != nil {
		return err
	}
	// kind's units start /usr/local/bin/containerd; Debian installs it in /usr/bin.
	for _, bin := range []string{"containerd", "containerd-shim-runc-v2"} {
		if err := symlink("/usr/bin/"+bin, filepath.Join(dir, "usr/local/bin", bin)); err != nil {
			return err
		}
	}
	// The CNI plugins kind's base carries in /opt/cni/bin (containerd's default), from Debian's package.
	for _, plugin := range []string{"host-local", "loopback", "ptp", "portmap"} {
		if err := copyFile(filepath.Join(dir, "usr/lib/cni", plugin), filepath.Join(dir, "opt/cni/bin", plugin), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "usr/local/bin/ctr"), file("ctr"), 0o755); err != nil {
		return err
	}
	// ctr oci spec, with kind's product-files hook and without rlimits: /etc/containerd/cri-base.json.
	raw, err := b.output(ctx, "chroot", dir, "ctr", "oci", "spec")
	if err != nil {
		return err
	}
	spec, err := criBaseSpec([]byte(raw))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "etc/containerd/cri-base.json"), spec, 0o644); err != nil {
		return err
	}
	if b.restrictOOM {
		conf := filepath.Join(dir, "etc/containerd/config.toml")
		data, err := os.ReadFile(conf)
		if err != nil {
			return err
		}
		changed := bytes.Replace(data, []byte("restrict_oom_score_adj = false"), []byte("restrict_oom_score_adj = true"), 1)
		if bytes.Equal(changed, data) {
			return errors.New("kind's containerd config has no restrict_oom_score_adj = false to change")
		}
		if err := os.WriteFile(conf, changed, 0o644); err != nil {
			return err
		}
	}
	// The images kind's build pulls for its own default CNI and storage, which this image replaces: the ctr shim
	// skips their fetch while the image is built (finish removes the list).
	notShipped, err := kindDefaultImages(b.kindDir)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "kind/offline/not-shipped"), []byte(strings.Join(notShipped, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	if err := b.run(ctx, nil, "chroot", dir, "systemctl", "enable", "kubelet.service", "containerd.service", "undo-mount-hacks.service"); err != nil {
		return err
	}
	return b.run(ctx, nil, "chroot", dir, "systemctl", "mask", "systemd-binfmt.service")
}

// criBaseSpec is kind's cri-base.json: `ctr oci spec` with /kind/bin/mount-product-files.sh as a createContainer
// hook and no rlimits.
func criBaseSpec(spec []byte) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(spec, &doc); err != nil {
		return nil, fmt.Errorf("ctr oci spec: %w", err)
	}
	hooks, _ := doc["hooks"].(map[string]any)
	if hooks == nil {
		hooks = map[string]any{}
	}
	create, _ := hooks["createContainer"].([]any)
	hooks["createContainer"] = append(create, map[string]any{"path": "/kind/bin/mount-product-files.sh"})
	doc["hooks"] = hooks
	if process, ok := doc["process"].(map[string]any); ok {
		delete(process, "rlimits")
	}
	return json.MarshalIndent(doc, "", "  ")
}

// kindDefaultImages are the images kind's node-image build pulls for its default CNI (kindnetd) and storage
// (local-path-provisioner), read from kind's source: the constants of const_cni.go and const_storage.go.
func kindDefaultImages(kindDir string) ([]string, error) {
	re := regexp.MustCompile(`(?m)^const \w+Image = "([^"]+)"`)
	var images []string
	for _, f := range []string{"const_cni.go", "const_storage.go"} {
		src, err := os.ReadFile(filepath.Join(kindDir, "pkg", "build", "nodeimage", f))
		if err != nil {
			return nil, err
		}
		for _, m := range re.FindAllStringSubmatch(string(src), -1) {
			images = append(images, m[1])
		}
	}
	if len(images) < 2 {
		return nil, fmt.Errorf("found %d default images in kind's source (%s), want kindnetd's and the storage's", len(images), kindDir)
	}
	return images, nil
}

// customizeUserland makes the Debian tree under kube-proxy, podnet and nginx what those images expect.
func (b *builder) customizeUserland(ctx context.Context, dir string) error {
	// The iptables wrapper: each iptables command picks the node's backend on its first run.
	if err := os.WriteFile(filepath.Join(dir, "usr/sbin/iptables-wrapper"), file("iptables-wrapper"), 0o755); err != nil {
		return err
	}
	for _, cmd := range []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"} {
		if err := symlink("iptables-wrapper", filepath.Join(dir, "usr/sbin", cmd)); err != nil {
			return err
		}
	}
	// nginx as the official image lays itself out: user nginx, conf.d, logs to the container's output.
	if err := b.run(ctx, nil, "chroot", dir, "useradd", "--system", "--no-create-home", "--user-group", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", "nginx"); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "etc/nginx/nginx.conf"), file("nginx.conf"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "etc/nginx/conf.d/default.conf"), file("nginx-default.conf"), 0o644); err != nil {
		return err
	}
	for log, to := range map[string]string{"access.log": "/dev/stdout", "error.log": "/dev/stderr"} {
		if err := symlink(to, filepath.Join(dir, "var/log/nginx", log)); err != nil {
			return err
		}
	}
	return nil
}

func (b *builder) binDir() string { return b.cached("bin-" + b.binaryKey) }

// binaries builds the Go programs and pause into the cache, unless it holds them.
func (b *builder) binaries(ctx context.Context) error {
	dir := b.binDir()
	start := time.Now()
	tmp, cached, err := b.startDir(dir, "binaries")
	if cached || err != nil {
		return err
	}
	// The project's own build flags (the Makefile's: static, -trimpath), so the Kubernetes packages the
	// in-process control plane compiled are reused; Kubernetes' release ldflags for the version.
	version := strings.TrimPrefix(KubernetesVersion, "v")
	major, minor, _ := strings.Cut(version, ".")
	minor, _, _ = strings.Cut(minor, ".")
	ldflags := strings.Join([]string{"-s", "-w",
		"-X", "k8s.io/component-base/version.gitVersion=" + KubernetesVersion,
		"-X", "k8s.io/component-base/version.gitMajor=" + major,
		"-X", "k8s.io/component-base/version.gitMinor=" + minor,
		"-X", "k8s.io/component-base/version.gitTreeState=clean",
		"-X", "k8s.io/client-go/pkg/version.gitVersion=" + KubernetesVersion,
		"-X", "k8s.io/client-go/pkg/version.gitMajor=" + major,
		"-X", "k8s.io/client-go/pkg/version.gitMinor=" + minor,
		"-X", "k8s.io/client-go/pkg/version.gitTreeState=clean",
	}, " ")
	packages := []string{}
	for _, c := range []string{"kubeadm", "kubelet", "kubectl", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy"} {
		packages = append(packages, "k8s.io/kubernetes/cmd/"+c)
	}
	packages = append(packages, "./lab/kind/nodeimage/cmd/etcd", "./lab/kind/nodeimage/cmd/podnet")
	b.say("binaries: go build %s", strings.Join(packages, " "))
	if err := b.goBuild(ctx, b.o.ModuleRoot, tmp, ldflags, packages...); err != nil {
		return err
	}
	tools := filepath.Join(b.o.ModuleRoot, "lab", "kind", "nodeimage", "tools")
	b.say("binaries: go build CoreDNS (tools/coredns) and crictl (tools/crictl)")
	if err := b.goBuild(ctx, filepath.Join(tools, "coredns"), tmp, "-s -w", "."); err != nil {
		return err
	}
	crictlVersion, err := b.goOutput(ctx, filepath.Join(tools, "crictl"), "list", "-m", "-f", "{{.Version}}", "sigs.k8s.io/cri-tools")
	if err != nil {
		return err
	}
	if err := b.goBuild(ctx, filepath.Join(tools, "crictl"), tmp, "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version="+crictlVersion, "sigs.k8s.io/cri-tools/cmd/crictl"); err != nil {
		return err
	}
	// pause, from Kubernetes' own source in its module, built as its Makefile builds it.
	kube, err := b.goOutput(ctx, b.o.ModuleRoot, "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes")
	if err != nil {
		return err
	}
	_, _, _, _, _, _, pause := Images()
	_, pauseTag, _ := strings.Cut(pause, ":")
	if err := b.run(ctx, nil, "gcc", "-Os", "-Wall", "-Werror", "-static", "-DVERSION=v"+pauseTag,
		"-o", filepath.Join(tmp, "pause"), filepath.Join(kube, "build", "pause", "linux", "pause.c")); err != nil {
		return fmt.Errorf("building pause (needs gcc and a static libc: libc6-dev): %w", err)
	}
	if err := b.commitDir(tmp, dir, "bin-"); err != nil {
		return err
	}
	b.say("binaries: built in %s", time.Since(start).Round(time.Second))
	return nil
}

// startDir is the start of a cached directory's build: cached is true when the cache holds dir finished (then
// said, as what); else tmp is an empty directory to build it in, for commitDir.
func (b *builder) startDir(dir, what string) (tmp string, cached bool, err error) {
	if _, err := os.Stat(filepath.Join(dir, ".done")); err == nil {
		b.say("%s: cached (%s)", what, dir)
		return "", true, nil
	}
	tmp = dir + ".part"
	os.RemoveAll(tmp)
	return tmp, false, os.MkdirAll(tmp, 0o755)
}

// commitDir makes the finished tmp the cache's dir (marked done), and removes the cache's other prefix* dirs.
func (b *builder) commitDir(tmp, dir, prefix string) error {
	if err := os.WriteFile(filepath.Join(tmp, ".done"), nil, 0o644); err != nil {
		return err
	}
	os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	b.keepOnly(prefix, dir)
	return nil
}

func (b *builder) goBuild(ctx context.Context, dir, out, ldflags string, packages ...string) error {
	args := append([]string{"build", "-trimpath", "-ldflags", ldflags, "-o", out + "/"}, packages...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build in %s: %v\n%s", dir, err, stderr.String())
	}
	return nil
}

// release makes (or takes from the cache) kind's release tarball: kubernetes/version, the kubeadm, kubelet and
// kubectl binaries, and the images' archives kind loads into the node (kube-proxy.tar carrying, besides
// kube-proxy, every other image the cluster and the lessons use).
func (b *builder) release(ctx context.Context) (string, error) {
	out := b.releaseFile()
	if _, err := os.Stat(out); err == nil {
		b.say("images: cached (%s)", out)
		return out, nil
	}
	start := time.Now()
	apiserver, controllerManager, scheduler, proxy, etcd, coredns, pause := Images()
	sandbox, err := kindSandboxImage(b.kindDir)
	if err != nil {
		return "", err
	}
	bin := b.binDir()
	stage := filepath.Join(b.work, "release")
	serverBin := filepath.Join(stage, "kubernetes", "server", "bin")
	if err := os.MkdirAll(serverBin, 0o755); err != nil {
		return "", err
	}
	// The distroless-like base of the control plane's images: what a static Go program may read.
	static, err := staticBase(b.cached("userland-" + b.userlandKey + ".tar"))
	if err != nil {
		return "", err
	}
	userland := "k8sguide/kind-userland:" + b.userlandKey
	if err := b.importTree(ctx, b.cached("userland-"+b.userlandKey+".tar"), userland, "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"); err != nil {
		return "", err
	}
	b.cleanupImages = append(b.cleanupImages, userland)
	podnet := "k8sguide.local/kind-podnet:" + b.binaryKey
	type image struct {
		ref, binary, path string
		onUserland        bool
		changes           []string
	}
	images := []image{
		{ref: apiserver, binary: "kube-apiserver", path: "/usr/local/bin/kube-apiserver"},
		{ref: controllerManager, binary: "kube-controller-manager", path: "/usr/local/bin/kube-controller-manager"},
		{ref: scheduler, binary: "kube-scheduler", path: "/usr/local/bin/kube-scheduler"},
		{ref: etcd, binary: "etcd", path: "/usr/local/bin/etcd"},
		{ref: coredns, binary: "coredns", path: "/coredns"},
		{ref: pause, binary: "pause", path: "/pause"},
		{ref: proxy, binary: "kube-proxy", path: "/usr/local/bin/kube-proxy", onUserland: true},
		{ref: podnet, binary: "podnet", path: "/usr/local/bin/podnet", onUserland: true},
		{ref: NginxImage, onUserland: true, changes: []string{`CMD ["nginx", "-g", "daemon off;"]`, "EXPOSE 80/tcp"}},
	}
	for _, im := range images {
		b.say("images: %s", im.ref)
		changes := im.changes
		if im.path != "" {
			changes = append(changes, fmt.Sprintf(`ENTRYPOINT [%q]`, im.path))
		}
		if im.onUserland {
			binary := ""
			if im.binary != "" {
				binary = filepath.Join(bin, im.binary)
			}
			err = b.addBinary(ctx, userland, im.ref, binary, im.path, changes)
		} else {
			var files map[string][]byte
			if im.binary != "pause" {
				files = static
			}
			err = b.importFiles(ctx, im.ref, files, filepath.Join(bin, im.binary), im.path, append(changes, "ENV PATH=/usr/local/bin:/usr/bin:/bin"))
		}
		if err != nil {
			return "", fmt.Errorf("image %s: %w", im.ref, err)
		}
		b.cleanupImages = append(b.cleanupImages, im.ref)
	}
	if _, err := b.docker(ctx, "tag", pause, sandbox); err != nil {
		return "", err
	}
	b.cleanupImages = append(b.cleanupImages, sandbox)
	// kind reads each archive's tags from its first metadata file and loads all of its images: the control plane
	// in an archive each, everything else in kube-proxy.tar, with a repositories file naming them all first.
	archives := map[string][]string{
		"kube-apiserver.tar":          {apiserver},
		"kube-controller-manager.tar": {controllerManager},
		"kube-scheduler.tar":          {scheduler},
		"kube-proxy.tar":              {proxy, etcd, coredns, pause, sandbox, podnet, NginxImage},
	}
	for name, refs := range archives {
		if err := b.save(ctx, filepath.Join(serverBin, name), refs); err != nil {
			return "", err
		}
	}
	for _, c := range []string{"kubeadm", "kubelet", "kubectl"} {
		if err := copyFile(filepath.Join(bin, c), filepath.Join(serverBin, c), 0o755); err != nil {
			return "", err
		}
	}
	if err := os.WriteFile(filepath.Join(stage, "kubernetes", "version"), []byte(KubernetesVersion+"\n"), 0o644); err != nil {
		return "", err
	}
	// Also the default-cni manifest, with podnet's image: finish puts it in the node image.
	cni := strings.ReplaceAll(string(file("default-cni.yaml")), "@PODNET_IMAGE@", podnet)
	if err := os.WriteFile(filepath.Join(stage, "kubernetes", "default-cni.yaml"), []byte(cni), 0o644); err != nil {
		return "", err
	}
	if err := gzipTar(stage, out+".part"); err != nil {
		return "", err
	}
	if err := os.Rename(out+".part", out); err != nil {
		return "", err
	}
	b.keepOnly("kubernetes-server-linux-", out)
	os.RemoveAll(stage)
	b.say("images: made in %s", time.Since(start).Round(time.Second))
	return out, nil
}

// kindSandboxImage is the pause image kind's containerd config names (sandbox_image), which kind's build loads in
// the place of kubeadm's.
func kindSandboxImage(kindDir string) (string, error) {
	conf, err := os.ReadFile(filepath.Join(kindDir, "images", "base", "files", "etc", "containerd", "config.toml"))
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`sandbox_image\s*=\s*"([^"]+)"`).FindSubmatch(conf)
	if m == nil {
		return "", errors.New("kind's containerd config names no sandbox_image")
	}
	return string(m[1]), nil
}

// addBinary makes image ref: image from with binary at path (none when binary is ""), committed with changes
// (and no command, unless changes give one: the container it is made in runs /bin/true).
func (b *builder) addBinary(ctx context.Context, from, ref, binary, path string, changes []string) error {
	id, err := b.docker(ctx, "create", from, "/bin/true")
	if err != nil {
		return err
	}
	id = strings.TrimSpace(id)
	defer b.docker(context.Background(), "rm", "--force", id)
	if binary != "" {
		if _, err := b.docker(ctx, "cp", binary, id+":"+path); err != nil {
			return err
		}
	}
	if !slices.ContainsFunc(changes, func(c string) bool { return strings.HasPrefix(c, "CMD ") }) {
		changes = append(slices.Clone(changes), "CMD []")
	}
	args := []string{"commit"}
	for _, c := range changes {
		args = append(args, "--change", c)
	}
	_, err = b.docker(ctx, append(args, id, ref)...)
	return err
}

// importFiles makes image ref from files plus binary at path, as one layer (docker import).
func (b *builder) importFiles(ctx context.Context, ref string, files map[string][]byte, binary, path string, changes []string) error {
	data, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	all := map[string][]byte{}
	for k, v := range files {
		all[k] = v
	}
	all[strings.TrimPrefix(path, "/")] = data
	archive := filepath.Join(b.work, "layer.tar")
	if err := writeLayer(archive, all); err != nil {
		return err
	}
	defer os.Remove(archive)
	args := []string{"import"}
	for _, c := range changes {
		args = append(args, "--change", c)
	}
	_, err = b.docker(ctx, append(args, archive, ref)...)
	return err
}

// importTree loads a tree's tar as image ref (docker import), with changes.
func (b *builder) importTree(ctx context.Context, archive, ref string, changes ...string) error {
	args := []string{"import"}
	for _, c := range changes {
		args = append(args, "--change", c)
	}
	_, err := b.docker(ctx, append(args, archive, ref)...)
	return err
}

// save writes refs to file as one docker archive, with a repositories file naming every ref placed first.
func (b *builder) save(ctx context.Context, file string, refs []string) error {
	raw := file + ".raw"
	if _, err := b.docker(ctx, append([]string{"save", "--output", raw}, refs...)...); err != nil {
		return err
	}
	defer os.Remove(raw)
	ids := map[string]string{}
	for _, ref := range refs {
		id, err := b.docker(ctx, "image", "inspect", "--format", "{{.ID}}", ref)
		if err != nil {
			return err
		}
		ids[ref] = strings.TrimPrefix(strings.TrimSpace(id), "sha256:")
	}
	return repositoriesFirst(raw, file, refs, ids)
}

// finish puts the pod network's manifest and the storage note in the image kind built, removes the list of
// images it does not ship, labels it with its key and names it.
func (b *builder) finish(ctx context.Context, built string) error {
	stage := filepath.Join(b.work, "finish")
	if err := os.MkdirAll(stage, 0o755); err != nil {
		return err
	}
	cni, err := readFromTarGz(b.releaseFile(), "kubernetes/default-cni.yaml")
	if err != nil {
		return err
	}
	storage := strings.ReplaceAll(string(file("default-storage.yaml")), "@ABOUT@", fmt.Sprintf("%q", About(b.key)))
	id, err := b.docker(ctx, "create", built, "/bin/true")
	if err != nil {
		return err
	}
	id = strings.TrimSpace(id)
	defer b.docker(context.Background(), "rm", "--force", id)
	for name, data := range map[string][]byte{"default-cni.yaml": cni, "default-storage.yaml": []byte(storage)} {
		f := filepath.Join(stage, name)
		if err := os.WriteFile(f, data, 0o644); err != nil {
			return err
		}
		if _, err := b.docker(ctx, "cp", f, id+":/kind/manifests/"+name); err != nil {
			return err
		}
	}
	// An empty not-shipped list: the ctr shim then skips nothing (docker cp cannot remove a file).
	empty := filepath.Join(stage, "not-shipped")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		return err
	}
	if _, err := b.docker(ctx, "cp", empty, id+":/kind/offline/not-shipped"); err != nil {
		return err
	}
	old, _ := b.docker(ctx, "image", "inspect", "--format", "{{.ID}}", Name())
	if _, err := b.docker(ctx, "commit",
		"--change", `ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]`,
		"--change", "CMD []",
		"--change", "LABEL "+KeyLabel+"="+b.key,
		id, Name()); err != nil {
		return err
	}
	if old = strings.TrimSpace(old); old != "" {
		// The image this one replaces, unless a cluster's nodes still run it (then docker keeps it).
		b.docker(ctx, "rmi", old)
	}
	return nil
}

func (b *builder) releaseFile() string {
	return b.cached("kubernetes-server-linux-" + runtime.GOARCH + "-" + b.releaseKey + ".tar.gz")
}

func (b *builder) docker(ctx context.Context, args ...string) (string, error) {
	return b.output(ctx, "docker", args...)
}

func (b *builder) output(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, lastLine(stderr.String()))
	}
	return stdout.String(), nil
}

func (b *builder) goOutput(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go %s: %v: %s", strings.Join(args, " "), err, lastLine(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// run runs a command whose output matters only when it fails (its last lines then say why).
func (b *builder) run(ctx context.Context, stdin io.Reader, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = stdin
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %v: %s", name, err, lastLine(out.String()))
	}
	return nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// aptMirror is the machine's first Debian source (deb822 or one-line), else deb.debian.org.
func aptMirror() string {
	if m := aptSource("debian"); m != "" {
		return m
	}
	return "http://deb.debian.org/debian"
}

// aptSource is the first of the machine's apt sources (deb822 or one-line) whose URL ends in /archive, or "".
func aptSource(archive string) string {
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*.sources")
	files = append(files, "/etc/apt/sources.list")
	re := regexp.MustCompile(`(?m)^(?:URIs:\s*|deb\s+(?:\[[^\]]*\]\s+)?)(https?://\S+/` + regexp.QuoteMeta(archive) + `)/?\s*$`)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if m := re.FindSubmatch(data); m != nil {
			return string(m[1])
		}
	}
	return ""
}

// unmountUnder lazily unmounts every mount at or below dir, deepest first.
func unmountUnder(dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		syscall.Unmount(points[i], syscall.MNT_DETACH)
	}
}

// setenvFor sets the environment variable key to value and returns what puts it back as it was.
func setenvFor(key, value string) (restore func()) {
	old, had := os.LookupEnv(key)
	os.Setenv(key, value)
	return func() {
		if had {
			os.Setenv(key, old)
		} else {
			os.Unsetenv(key)
		}
	}
}
