package nodeimage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf/datapath"
)

// Cilium's images, built from Cilium's own source with no registry: what the ebpf dataplane runs on a kind lab
// where quay.io cannot be reached (lab/providers installs the chart from the same source and loads them into
// the nodes). They follow Cilium's Dockerfiles (images/cilium, images/runtime, images/operator):
//   - the agent image: a Debian tree with what Cilium's runtime image installs (iproute2, iptables behind the
//     iptables wrapper, ipset, kmod, ca-certificates, libatomic1), clang and llc (Debian's LLVM 19, the release
//     Cilium's cilium-llvm image carries) as /usr/local/bin/clang and llc, and bpftool; on it, what `make
//     build-container install-container-binary` installs: cilium-agent, cilium-dbg (and its old name cilium),
//     cilium-health, cilium-health-responder, cilium-mount, cilium-sysctlfix, the CNI plugin in /opt/cni/bin,
//     the datapath sources in /var/lib/cilium/bpf, and the init and CNI scripts the chart runs. Left out: Envoy
//     (the L7 proxy, its own image, off in the lab), the hubble CLI, cilium-bugtool and gops (debugging tools no
//     lab command runs), bash completion;
//   - the operator image: cilium-operator-generic (the variant for clusters without cloud IPAM) on a static base.
//
// The Go programs are built in Cilium's module (github.com/cilium/cilium@CiliumVersion, as the netns engine's
// sources) as Cilium's Makefile builds them (CGO_ENABLED=0, tags osusergo, the version in pkg/version), with
// Cilium's go.mod and go.sum and two changes the module proxy forces (files/cilium): see ciliumModfile.

// CiliumRecipe changes when what goes into Cilium's images changes in a way its inputs' hashes do not show.
const CiliumRecipe = "2"

// CiliumPackages are the agent image's Debian packages: images/runtime/install-runtime-deps.sh's list without
// bash-completion, plus clang/llc and bpftool (Cilium copies them from its own LLVM and bpftool images), and
// Debian's CNI plugins for the loopback plugin the chart's CNI installer copies (Cilium builds it from
// containernetworking/plugins).
var CiliumPackages = []string{
	"iproute2", "iptables", "ipset", "kmod", "ca-certificates", "libatomic1", "clang-19", "llvm-19",
	"containernetworking-plugins",
}

// ciliumSecurityPackages come from Debian's security archive, which debootstrap does not read (bookworm ships
// bpftool there only).
var ciliumSecurityPackages = []string{"bpftool"}

// ciliumPrograms are Cilium's programs in the agent image: package in Cilium's module → installed name.
var ciliumPrograms = []struct{ pkg, name, dir string }{
	{"./daemon", "cilium-agent", "usr/bin"},
	{"./cilium-dbg", "cilium-dbg", "usr/bin"},
	{"./cilium-health", "cilium-health", "usr/bin"},
	{"./cilium-health/responder", "cilium-health-responder", "usr/bin"},
	{"./tools/mount", "cilium-mount", "usr/bin"},
	{"./tools/sysctlfix", "cilium-sysctlfix", "usr/bin"},
	{"./plugins/cilium-cni", "cilium-cni", "opt/cni/bin"},
}

// The operator: its package, and the build tag of the generic variant (operator/Makefile).
const (
	operatorPackage = "./operator"
	operatorTag     = "ipam_provider_operator"
)

// ciliumScripts are the scripts the chart's init containers run, at the image's root (images/cilium/Dockerfile).
var ciliumScripts = []string{"images/cilium/init-container.sh", "plugins/cilium-cni/install-plugin.sh", "plugins/cilium-cni/cni-uninstall.sh"}

// bpfIgnored are the parts of bpf/ Cilium's `make install-bpf` leaves out (Makefile.defs BPF_SRCFILES_IGNORE).
var bpfIgnored = regexp.MustCompile(`^(tests|complexity-tests|custom)/|^(Makefile|Makefile\.bpf|\.gitignore)$|\.(i|s)$|^\.rebuild_all$`)

// BuildCilium makes Cilium's agent and operator images and loads them into the engine DOCKER_HOST names, and
// returns their names. Images of those names whose key matches are kept as they are.
func BuildCilium(ctx context.Context, o Options) ([]string, error) {
	b, err := newBuilder(ctx, o)
	if err != nil {
		return nil, err
	}
	defer b.cleanup()
	agent, operator := datapath.LocalImages()
	src, err := datapath.Sources()
	if err != nil {
		return nil, err
	}
	goVersion, err := b.goOutput(ctx, b.o.ModuleRoot, "env", "GOVERSION")
	if err != nil {
		return nil, err
	}
	modHash, err := ciliumModuleHash(src)
	if err != nil {
		return nil, err
	}
	recipe, err := hashFS(selfFS{os.DirFS(filepath.Join(b.o.ModuleRoot, "lab", "kind", "nodeimage"))})
	if err != nil {
		return nil, err
	}
	security := securityMirror(b.o.Mirror)
	b.rawKeys["ciliumrt"] = Key("debootstrap", Suite, b.o.Mirror, strings.Join(CiliumPackages, ","))
	treeKey := Key("ciliumrt", CiliumRecipe, b.rawKeys["ciliumrt"], security, strings.Join(ciliumSecurityPackages, ","), recipe)
	binKey := Key("cilium-bin", CiliumRecipe, datapath.CiliumVersion, goVersion, modHash, runtime.GOARCH)
	key := Key("cilium-image", CiliumRecipe, treeKey, binKey, recipe)
	b.say("cilium: key %s (tree %s, binaries %s); sources %s", key, treeKey, binKey, src)
	if !o.Rebuild && b.hasImages(ctx, key, agent, operator) {
		b.say("%s and %s are in the engine already (key %s)", agent, operator, key)
		return []string{agent, operator}, nil
	}
	start := time.Now()
	bin := b.cached("cilium-bin-" + binKey)
	errc := make(chan error, 1)
	go func() { errc <- b.ciliumBinaries(ctx, src, bin) }()
	treeErr := b.tree(ctx, "ciliumrt", treeKey, CiliumPackages, func(ctx context.Context, dir string) error {
		return b.customizeCilium(ctx, dir, security)
	})
	if err := <-errc; err != nil {
		return nil, err
	}
	if treeErr != nil {
		return nil, treeErr
	}
	treeTar := b.cached("ciliumrt-" + treeKey + ".tar")
	runtimeImage := "k8sguide/cilium-runtime:" + treeKey
	if err := b.importTree(ctx, treeTar, runtimeImage, "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"); err != nil {
		return nil, err
	}
	b.cleanupImages = append(b.cleanupImages, runtimeImage)

	// The agent: the runtime tree, and what Cilium's builder stage installs, in one layer.
	stage := filepath.Join(b.work, "cilium")
	for _, p := range ciliumPrograms {
		if err := copyFile(filepath.Join(bin, p.name), filepath.Join(mkdir(stage, p.dir), p.name), 0o755); err != nil {
			return nil, err
		}
	}
	if err := symlink("cilium-dbg", filepath.Join(stage, "usr/bin/cilium")); err != nil {
		return nil, err
	}
	for _, s := range ciliumScripts {
		if err := copyFile(filepath.Join(src, s), filepath.Join(stage, filepath.Base(s)), 0o755); err != nil {
			return nil, err
		}
	}
	if err := copyBPF(filepath.Join(src, "bpf"), filepath.Join(mkdir(stage, "var/lib/cilium"), "bpf")); err != nil {
		return nil, err
	}
	mkdir(stage, "home/cilium")
	b.say("cilium: image %s", agent)
	if err := b.addTree(ctx, runtimeImage, agent, stage, []string{
		"ENV INITSYSTEM=SYSTEMD",
		"WORKDIR /home/cilium",
		`CMD ["/usr/bin/cilium-dbg"]`,
		"LABEL " + datapath.LocalImageKeyLabel + "=" + key,
	}); err != nil {
		return nil, err
	}
	// The operator: a static program on a static base (CA certificates, passwd), as Cilium's distroless one.
	static, err := staticBase(treeTar)
	if err != nil {
		return nil, err
	}
	name := "cilium-operator" + datapath.OperatorSuffix
	b.say("cilium: image %s", operator)
	if err := b.importFiles(ctx, operator, static, filepath.Join(bin, name), "/usr/bin/"+name, []string{
		"ENV PATH=/usr/local/bin:/usr/bin:/bin",
		"WORKDIR /",
		"LABEL " + datapath.LocalImageKeyLabel + "=" + key,
	}); err != nil {
		return nil, err
	}
	b.say("cilium: built %s and %s in %s", agent, operator, time.Since(start).Round(time.Second))
	return []string{agent, operator}, nil
}

// hasImages tells whether the engine holds every ref with the key label key.
func (b *builder) hasImages(ctx context.Context, key string, refs ...string) bool {
	for _, ref := range refs {
		got, err := b.docker(ctx, "image", "inspect", "--format", "{{index .Config.Labels \""+datapath.LocalImageKeyLabel+"\"}}", ref)
		if err != nil || strings.TrimSpace(got) != key {
			return false
		}
	}
	return true
}

// customizeCilium does what Cilium's runtime Dockerfile does after its packages: bpftool, clang and llc where the
// agent finds them, the iptables wrapper installed, and the loopback plugin where the CNI installer looks.
func (b *builder) customizeCilium(ctx context.Context, dir, security string) error {
	// Debian's security archive, for bpftool: apt in the tree, then its lists go (tree() clears them).
	list := filepath.Join(dir, "etc/apt/sources.list.d/k8sguide-security.list")
	if err := os.WriteFile(list, []byte("deb "+security+" "+Suite+"-security main\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "etc/resolv.conf"), mustRead("/etc/resolv.conf"), 0o644); err != nil {
		return err
	}
	env := []string{"DEBIAN_FRONTEND=noninteractive", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if err := b.runEnv(ctx, env, "chroot", dir, "apt-get", "-o", "Acquire::Retries=3", "update"); err != nil {
		return err
	}
	if err := b.runEnv(ctx, env, "chroot", append([]string{dir, "apt-get", "install", "-y", "--no-install-recommends"}, ciliumSecurityPackages...)...); err != nil {
		return err
	}
	os.Remove(list)
	os.WriteFile(filepath.Join(dir, "etc/resolv.conf"), nil, 0o644)
	// The agent runs `clang` (pkg/datapath/loader); Cilium's image has LLVM's clang and llc in /usr/local/bin.
	for name, target := range map[string]string{"clang": "/usr/bin/clang-19", "llc": "/usr/bin/llc-19"} {
		if _, err := os.Lstat(filepath.Join(dir, target)); err != nil {
			return fmt.Errorf("no %s in the tree: %w", target, err)
		}
		if err := symlink(target, filepath.Join(dir, "usr/local/bin", name)); err != nil {
			return err
		}
	}
	// `iptables-wrapper install` in Cilium's runtime image: every iptables command goes through the wrapper.
	if err := os.WriteFile(filepath.Join(dir, "usr/sbin/iptables-wrapper"), file("iptables-wrapper"), 0o755); err != nil {
		return err
	}
	for _, cmd := range []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"} {
		if err := symlink("iptables-wrapper", filepath.Join(dir, "usr/sbin", cmd)); err != nil {
			return err
		}
	}
	// install-plugin.sh copies /cni/loopback to the node unless it has one.
	return copyFile(filepath.Join(dir, "usr/lib/cni/loopback"), filepath.Join(mkdir(dir, "cni"), "loopback"), 0o755)
}

// ciliumBinaries builds Cilium's programs into dir, unless it holds them.
func (b *builder) ciliumBinaries(ctx context.Context, src, dir string) error {
	start := time.Now()
	tmp, cached, err := b.startDir(dir, "cilium: binaries")
	if cached || err != nil {
		return err
	}
	modfile, err := ciliumModfile(src, b.work)
	if err != nil {
		return err
	}
	// Cilium's Makefile stamps "VERSION REVISION DATE" (git's short hash and author date), which its version
	// parser splits on spaces; a module has no git: "module" and the release's time, as the module proxy dates it.
	info, err := b.goOutput(ctx, filepath.Join(b.o.ModuleRoot, "dataplanes", "ebpf", "cilium"), "list", "-m", "-json", "github.com/cilium/cilium")
	if err != nil {
		return err
	}
	var mod struct{ Time time.Time }
	if err := json.Unmarshal([]byte(info), &mod); err != nil {
		return fmt.Errorf("go list -m -json github.com/cilium/cilium: %w", err)
	}
	version := strings.Join([]string{strings.TrimPrefix(datapath.CiliumVersion, "v"), "module", mod.Time.UTC().Format(time.RFC3339)}, " ")
	ldflags := "-s -w -X 'github.com/cilium/cilium/pkg/version.ciliumVersion=" + version + "'"
	build := func(tags, out string, pkgs ...string) error {
		args := append([]string{"build", "-modfile=" + modfile, "-mod=readonly", "-trimpath", "-buildvcs=false",
			"-tags=" + tags, "-ldflags", ldflags, "-o", out}, pkgs...)
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = src
		// Cilium's go.sum answers for every module: no checksum database, no workspace of the caller's.
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off", "GONOSUMDB=", "GOSUMDB=off")
		out2, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("go build in %s: %v\n%s", src, err, out2)
		}
		return nil
	}
	var pkgs []string
	for _, p := range ciliumPrograms {
		pkgs = append(pkgs, p.pkg)
	}
	b.say("cilium: go build %s (Cilium %s)", strings.Join(append(pkgs, operatorPackage), " "), datapath.CiliumVersion)
	// One build for the agent's programs: go names each after its package's folder.
	if err := build("osusergo", tmp+"/", pkgs...); err != nil {
		return err
	}
	for _, p := range ciliumPrograms {
		if err := os.Rename(filepath.Join(tmp, filepath.Base(p.pkg)), filepath.Join(tmp, p.name)); err != nil {
			return err
		}
	}
	if err := build("osusergo,"+operatorTag, filepath.Join(tmp, "cilium-operator"+datapath.OperatorSuffix), operatorPackage); err != nil {
		return err
	}
	if err := b.commitDir(tmp, dir, "cilium-bin-"); err != nil {
		return err
	}
	b.say("cilium: binaries built in %s", time.Since(start).Round(time.Second))
	return nil
}

// ciliumModfile writes the go.mod and go.sum Cilium's programs are built with into work/cilium-mod and returns
// the go.mod's path: Cilium's own, plus what the Go module proxy forces (files/cilium/):
//   - github.com/osrg/gobgp/v4: Cilium pins a pseudo-version the proxy refuses (403); v4.7.0, the next release,
//     is used. Only Cilium's BGP control plane links it, which the lab leaves off.
//   - sigs.k8s.io/mcs-api/controllers: the proxy serves no version of this module (mcs-api's controllers folder,
//     a module of its own). Cilium uses one constant from it, DerivedServiceAnnotation (for Multi-Cluster
//     Services, off in the lab); files/cilium/mcs-api-controllers holds that constant with mcs-api v0.5.2's value
//     and nothing else.
func ciliumModfile(src, work string) (string, error) {
	dir := filepath.Join(work, "cilium-mod")
	mcs := filepath.Join(dir, "mcs-api-controllers")
	if err := os.MkdirAll(mcs, 0o755); err != nil {
		return "", err
	}
	for _, f := range []string{"go.mod", "controllers.go"} {
		if err := os.WriteFile(filepath.Join(mcs, f), file("cilium/mcs-api-controllers/"+f+".txt"), 0o644); err != nil {
			return "", err
		}
	}
	mod, err := os.ReadFile(filepath.Join(src, "go.mod"))
	if err != nil {
		return "", err
	}
	sum, err := os.ReadFile(filepath.Join(src, "go.sum"))
	if err != nil {
		return "", err
	}
	mod = append(mod, "\n"+strings.ReplaceAll(string(file("cilium/replace.txt")), "@MCS@", mcs)...)
	sum = append(sum, file("cilium/go.sum.txt")...)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), mod, 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		return "", err
	}
	return filepath.Join(dir, "go.mod"), nil
}

// ciliumModuleHash hashes what Cilium's programs are built from: the module's go.mod and go.sum (the module cache
// holds each version read-only and unchanged, so its version stands for its sources) and files/cilium.
func ciliumModuleHash(src string) (string, error) {
	h := sha256.New()
	for _, f := range []string{"go.mod", "go.sum", "VERSION"} {
		data, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", f, len(data))
		h.Write(data)
	}
	sub, err := fs.Sub(files, "files/cilium")
	if err != nil {
		return "", err
	}
	own, err := hashFS(sub)
	if err != nil {
		return "", err
	}
	h.Write([]byte(own))
	return hex.EncodeToString(h.Sum(nil)), nil
}

// copyBPF copies Cilium's bpf/ as `make install-bpf` does: every file but the tests and build files, 0644.
func copyBPF(from, to string) error {
	if err := os.MkdirAll(to, 0o755); err != nil {
		return err
	}
	return filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, p)
		if err != nil || rel == "." {
			return err
		}
		if bpfIgnored.MatchString(filepath.ToSlash(rel)) || (d.IsDir() && bpfIgnored.MatchString(filepath.ToSlash(rel)+"/")) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		return copyFile(p, filepath.Join(to, rel), 0o644)
	})
}

// addTree makes image ref: image from with the files below dir added (docker cp), committed with changes.
func (b *builder) addTree(ctx context.Context, from, ref, dir string, changes []string) error {
	id, err := b.docker(ctx, "create", from, "/bin/true")
	if err != nil {
		return err
	}
	id = strings.TrimSpace(id)
	defer b.docker(context.Background(), "rm", "--force", id)
	if _, err := b.docker(ctx, "cp", dir+"/.", id+":/"); err != nil {
		return err
	}
	args := []string{"commit"}
	for _, c := range changes {
		args = append(args, "--change", c)
	}
	_, err = b.docker(ctx, append(args, id, ref)...)
	return err
}

// securityMirror is Debian's security archive matching mirror: the machine's debian-security source, else the
// mirror's sibling (deb.debian.org's layout).
func securityMirror(mirror string) string {
	if m := aptSource("debian-security"); m != "" {
		return m
	}
	if strings.HasSuffix(mirror, "/debian") {
		return mirror + "-security"
	}
	return "http://deb.debian.org/debian-security"
}

func mkdir(root, rel string) string {
	d := filepath.Join(root, rel)
	os.MkdirAll(d, 0o755)
	return d
}

func mustRead(name string) []byte {
	data, _ := os.ReadFile(name)
	return data
}

func (b *builder) runEnv(ctx context.Context, env []string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, lastLine(string(out)))
	}
	return nil
}
