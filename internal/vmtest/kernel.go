//go:build linux

package vmtest

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
	"sort"
	"strings"

	"github.com/k8sguide/k8sguide/internal/privdir"
)

// The kernel the harness was tested with: Debian bookworm's cloud flavour, which boots in about a second under
// TCG (the generic flavour takes ~6 s) and has IPVS, ipset, nf_tables and veth as modules. Debian retires old
// ABIs from its mirrors, so when this one cannot be downloaded EnsureKernel takes the one the
// linux-image-cloud-amd64 metapackage currently depends on.
const (
	PinnedPackage = "linux-image-6.1.0-56-cloud-amd64"
	PinnedVersion = "6.1.192-2"
	metapackage   = "linux-image-cloud-amd64"
)

// pinnedKernel is what EnsureKernel tries first (a variable so that the fallback can be exercised).
var pinnedKernel = debPackage{PinnedPackage, PinnedVersion}

// CacheEnv names the directory kernels are cached in, overriding $XDG_CACHE_HOME/k8sguide/vm.
const CacheEnv = "K8SGUIDE_VM_CACHE"

// Kernel is an extracted kernel package in the cache.
type Kernel struct {
	Package        string // Debian package, e.g. linux-image-6.1.0-56-cloud-amd64
	PackageVersion string // e.g. 6.1.192-2
	Version        string // the kernel release (uname -r), the name of its /lib/modules directory
	Dir            string // the cache entry holding everything below
	Vmlinuz        string // the kernel image for qemu -kernel
	ModulesDir     string // lib/modules/<Version>, with a modules.dep the harness wrote
}

// kernelMeta is Dir/kernel.json. Its presence marks a complete entry: entries are renamed into place whole.
type kernelMeta struct {
	Package        string `json:"package"`
	PackageVersion string `json:"packageVersion"`
	Version        string `json:"version"`
}

// DefaultCacheDir is $K8SGUIDE_VM_CACHE, else $XDG_CACHE_HOME/k8sguide/vm, else ~/.cache/k8sguide/vm.
func DefaultCacheDir() (string, error) {
	if d := os.Getenv(CacheEnv); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "k8sguide", "vm"), nil
}

// EnsureKernel returns the pinned kernel from cacheDir (DefaultCacheDir when empty), downloading it with
// apt-get first if needed, or the current ABI when Debian no longer has the pinned one. Offline, it settles
// for any kernel already in the cache. Progress goes to log.
func EnsureKernel(ctx context.Context, cacheDir string, log io.Writer) (*Kernel, error) {
	if cacheDir == "" {
		d, err := DefaultCacheDir()
		if err != nil {
			return nil, err
		}
		cacheDir = d
	}
	// The kernels and modules cached here are booted and loaded: the cache must be no one else's to write.
	if err := privdir.Ensure(cacheDir); err != nil {
		return nil, err
	}
	pinned := pinnedKernel
	if k, err := cachedKernel(cacheDir, pinned); err == nil {
		return k, nil
	}
	if k := fallbackKernel(cacheDir, pinned); k != nil {
		return k, nil
	}
	errPinned := fetchKernel(ctx, cacheDir, pinned, log)
	if errPinned == nil {
		return cachedKernel(cacheDir, pinned)
	}
	fmt.Fprintf(log, "vmtest: pinned kernel %s unavailable (%v); trying the current %s\n", pinned, errPinned, metapackage)
	current, err := currentKernelPackage(ctx)
	if err == nil {
		if _, cerr := cachedKernel(cacheDir, current); cerr != nil {
			err = fetchKernel(ctx, cacheDir, current, log)
		}
	}
	if err == nil {
		recordFallback(cacheDir, pinned, current)
		return cachedKernel(cacheDir, current)
	}
	if k := anyCachedKernel(cacheDir); k != nil {
		fmt.Fprintf(log, "vmtest: using cached %s %s (download failed: %v)\n", k.Package, k.PackageVersion, err)
		return k, nil
	}
	return nil, fmt.Errorf("no kernel: pinned %s: %v; current: %v", pinned, errPinned, err)
}

// The fallback file remembers which kernel stands in for a pinned package Debian no longer has, so that later
// boots neither retry the download (with an apt-get update) nor ask apt-cache (1.5 s) each time. It names the
// pin, so bumping PinnedPackage makes it moot.
const fallbackFile = "fallback"

func fallbackKernel(cacheDir string, pinned debPackage) *Kernel {
	data, err := os.ReadFile(filepath.Join(cacheDir, fallbackFile))
	if err != nil {
		return nil
	}
	pin, entry, ok := strings.Cut(strings.TrimSpace(string(data)), " ")
	if !ok || pin != pinned.String() {
		return nil
	}
	k, err := readKernel(filepath.Join(cacheDir, filepath.Base(entry)))
	if err != nil {
		return nil
	}
	return k
}

func recordFallback(cacheDir string, pinned, current debPackage) {
	tmp := filepath.Join(cacheDir, fmt.Sprintf(".%s.%d", fallbackFile, os.Getpid()))
	if os.WriteFile(tmp, []byte(pinned.String()+" "+current.dirName()+"\n"), 0o644) == nil {
		os.Rename(tmp, filepath.Join(cacheDir, fallbackFile))
	}
}

// debPackage is a package name and version, as apt-get download takes them.
type debPackage struct{ Name, Version string }

func (p debPackage) String() string { return p.Name + "=" + p.Version }

// dirName is the package's cache entry name, like the .deb's file name without its architecture.
func (p debPackage) dirName() string { return p.Name + "_" + p.Version }

func cachedKernel(cacheDir string, p debPackage) (*Kernel, error) {
	return readKernel(filepath.Join(cacheDir, p.dirName()))
}

func readKernel(dir string) (*Kernel, error) {
	data, err := os.ReadFile(filepath.Join(dir, "kernel.json"))
	if err != nil {
		return nil, err
	}
	var m kernelMeta
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return &Kernel{
		Package:        m.Package,
		PackageVersion: m.PackageVersion,
		Version:        m.Version,
		Dir:            dir,
		Vmlinuz:        filepath.Join(dir, "vmlinuz"),
		ModulesDir:     filepath.Join(dir, "lib", "modules", m.Version),
	}, nil
}

// anyCachedKernel is the newest-named complete entry in the cache, or nil.
func anyCachedKernel(cacheDir string) *Kernel {
	entries, _ := os.ReadDir(cacheDir)
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() > entries[j].Name() })
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue // a fetch in progress
		}
		if k, err := readKernel(filepath.Join(cacheDir, e.Name())); err == nil {
			return k
		}
	}
	return nil
}

// currentKernelPackage asks apt which ABI package the metapackage depends on now, and its candidate version.
func currentKernelPackage(ctx context.Context) (debPackage, error) {
	out, err := command(ctx, "", "apt-cache", "depends", metapackage)
	if err != nil {
		return debPackage{}, err
	}
	name := aptField(out, "Depends", "linux-image-")
	if name == "" {
		return debPackage{}, fmt.Errorf("apt-cache depends %s names no linux-image package", metapackage)
	}
	if out, err = command(ctx, "", "apt-cache", "show", "--no-all-versions", name); err != nil {
		return debPackage{}, err
	}
	version := aptField(out, "Version", "")
	if version == "" {
		return debPackage{}, fmt.Errorf("apt-cache show %s gives no Version", name)
	}
	return debPackage{name, version}, nil
}

// aptField is the first "Key: value" of apt-cache's output whose value starts with prefix.
func aptField(out, key, prefix string) string {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+": "); ok && strings.HasPrefix(v, prefix) {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// fetchKernel downloads and extracts p into cacheDir/p.dirName(). It works in a private temporary directory
// and renames the finished entry into place, so two test processes fetching at once both end up with one
// complete entry.
func fetchKernel(ctx context.Context, cacheDir string, p debPackage, log io.Writer) error {
	tmp, err := os.MkdirTemp(cacheDir, ".fetch-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	fmt.Fprintf(log, "vmtest: downloading %s into %s\n", p, cacheDir)
	deb, err := downloadDeb(ctx, tmp, p)
	if err != nil {
		return err
	}
	root := filepath.Join(tmp, "root")
	if _, err := command(ctx, "", "dpkg-deb", "-x", deb, root); err != nil {
		return err
	}
	entry := filepath.Join(tmp, "entry")
	if err := assembleEntry(root, entry, p); err != nil {
		return err
	}
	err = os.Rename(entry, filepath.Join(cacheDir, p.dirName()))
	if err != nil {
		if _, lost := cachedKernel(cacheDir, p); lost == nil {
			return nil // another process put the same entry in place first
		}
		return err
	}
	fmt.Fprintf(log, "vmtest: kernel cached in %s\n", filepath.Join(cacheDir, p.dirName()))
	return nil
}

// downloadDeb runs apt-get download in dir, after an apt-get update when the first try fails (stale lists
// name files the mirror no longer has).
func downloadDeb(ctx context.Context, dir string, p debPackage) (string, error) {
	_, err := command(ctx, dir, "apt-get", "download", p.String())
	if err != nil {
		if _, uerr := command(ctx, "", "apt-get", "update"); uerr != nil {
			return "", fmt.Errorf("%v; apt-get update: %v", err, uerr)
		}
		if _, err = command(ctx, dir, "apt-get", "download", p.String()); err != nil {
			return "", err
		}
	}
	debs, _ := filepath.Glob(filepath.Join(dir, "*.deb"))
	if len(debs) != 1 {
		return "", fmt.Errorf("apt-get download %s left %d .deb files", p, len(debs))
	}
	return debs[0], nil
}

// assembleEntry moves what the harness needs out of the extracted package root into entry: vmlinuz, config and
// lib/modules/<release>, plus the modules.dep depmod would have written and kernel.json.
func assembleEntry(root, entry string, p debPackage) error {
	images, _ := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
	if len(images) != 1 {
		return fmt.Errorf("%s: expected one boot/vmlinuz-*, found %d", p, len(images))
	}
	release := strings.TrimPrefix(filepath.Base(images[0]), "vmlinuz-")
	// bookworm installs modules under /lib, later releases under /usr/lib.
	mods := filepath.Join(root, "lib", "modules", release)
	if _, err := os.Stat(mods); err != nil {
		mods = filepath.Join(root, "usr", "lib", "modules", release)
	}
	modDir := filepath.Join(entry, "lib", "modules", release)
	if err := os.MkdirAll(filepath.Dir(modDir), 0o755); err != nil {
		return err
	}
	moves := [][2]string{
		{images[0], filepath.Join(entry, "vmlinuz")},
		{filepath.Join(root, "boot", "config-"+release), filepath.Join(entry, "config")},
		{mods, modDir},
	}
	for _, m := range moves {
		if err := os.Rename(m[0], m[1]); err != nil {
			return err
		}
	}
	if err := writeModulesDep(modDir); err != nil {
		return err
	}
	meta, _ := json.MarshalIndent(kernelMeta{p.Name, p.Version, release}, "", "  ")
	return os.WriteFile(filepath.Join(entry, "kernel.json"), append(meta, '\n'), 0o644)
}

// command runs a tool and returns its stdout; a failure carries its stderr.
func command(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if errors.Is(err, exec.ErrNotFound) || msg == "" {
			return "", fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
		}
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, lastLines(msg, 3))
	}
	return stdout.String(), nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " / ")
}
