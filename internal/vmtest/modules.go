//go:build linux

package vmtest

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Debian's kernel package ships no modules.dep: depmod writes it when the package is installed, and we only
// extract the package. So the harness writes one itself, in depmod's format, from the "depends=" field each
// module carries in its .modinfo section. Unlike depmod's, each line lists a module's direct dependencies
// only; the closure below walks them.

// writeModulesDep writes modDir/modules.dep for every .ko under modDir.
func writeModulesDep(modDir string) error {
	paths := map[string]string{} // module name -> path relative to modDir
	var rels []string
	err := filepath.WalkDir(modDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if !strings.HasSuffix(p, ".ko") {
			if isCompressedModule(p) {
				return fmt.Errorf("%s: compressed modules are not supported (finit_module would need "+
					"MODULE_INIT_COMPRESSED_FILE and the harness an xz/zstd reader for .modinfo)", p)
			}
			return nil
		}
		rel, _ := filepath.Rel(modDir, p)
		paths[moduleName(rel)] = rel
		rels = append(rels, rel)
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(rels)
	var out bytes.Buffer
	for _, rel := range rels {
		deps, err := modinfoDepends(filepath.Join(modDir, rel))
		if err != nil {
			return err
		}
		depRels := make([]string, 0, len(deps))
		for _, d := range deps {
			dr, ok := paths[d]
			if !ok {
				return fmt.Errorf("%s depends on %s, which is not in %s", rel, d, modDir)
			}
			depRels = append(depRels, dr)
		}
		fmt.Fprintf(&out, "%s:", rel)
		for _, dr := range depRels {
			fmt.Fprintf(&out, " %s", dr)
		}
		out.WriteByte('\n')
	}
	return os.WriteFile(filepath.Join(modDir, "modules.dep"), out.Bytes(), 0o644)
}

func isCompressedModule(p string) bool {
	for _, ext := range []string{".ko.xz", ".ko.zst", ".ko.gz"} {
		if strings.HasSuffix(p, ext) {
			return true
		}
	}
	return false
}

// modinfoDepends reads the "depends=a,b" entry of a module's .modinfo section (NUL-separated key=value strings).
func modinfoDepends(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("%s: no .modinfo section", path)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, kv := range bytes.Split(data, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok {
			var deps []string
			for _, d := range strings.Split(string(v), ",") {
				if d != "" {
					deps = append(deps, normalizeModule(d))
				}
			}
			return deps, nil
		}
	}
	return nil, nil
}

// moduleName is the name the kernel knows a module file by: "kernel/net/netfilter/ipvs/ip_vs.ko" -> "ip_vs".
func moduleName(path string) string {
	base := filepath.Base(path)
	if i := strings.Index(base, ".ko"); i >= 0 {
		base = base[:i]
	}
	return normalizeModule(base)
}

// normalizeModule folds '-' to '_', as the kernel and modprobe treat them as the same character in names.
func normalizeModule(name string) string { return strings.ReplaceAll(name, "-", "_") }

// moduleIndex is modules.dep and modules.builtin of one kernel.
type moduleIndex struct {
	path    map[string]string   // module name -> path relative to the modules directory
	deps    map[string][]string // module name -> names of the modules it needs
	builtin map[string]bool     // modules compiled into the kernel: nothing to load
}

func loadModuleIndex(modDir string) (*moduleIndex, error) {
	dep, err := os.Open(filepath.Join(modDir, "modules.dep"))
	if err != nil {
		return nil, err
	}
	defer dep.Close()
	ix, err := parseModulesDep(dep)
	if err != nil {
		return nil, err
	}
	// modules.builtin is optional: a kernel with everything as modules has an empty one.
	if b, err := os.Open(filepath.Join(modDir, "modules.builtin")); err == nil {
		defer b.Close()
		sc := bufio.NewScanner(b)
		for sc.Scan() {
			if line := strings.TrimSpace(sc.Text()); line != "" {
				ix.builtin[moduleName(line)] = true
			}
		}
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return ix, nil
}

// parseModulesDep reads depmod's format: "path.ko: dep1.ko dep2.ko" per line.
func parseModulesDep(r io.Reader) (*moduleIndex, error) {
	ix := &moduleIndex{path: map[string]string{}, deps: map[string][]string{}, builtin: map[string]bool{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		mod, deps, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("modules.dep line %d: no ':' in %q", n, line)
		}
		name := moduleName(mod)
		ix.path[name] = mod
		for _, d := range strings.Fields(deps) {
			ix.deps[name] = append(ix.deps[name], moduleName(d))
		}
	}
	return ix, sc.Err()
}

// closure returns the module files to load for names, each after the modules it depends on, in the order the
// names were asked for where dependencies allow. Built-in modules are left out; unknown names are an error.
func (ix *moduleIndex) closure(names []string) ([]string, error) {
	const (
		visiting = 1
		done     = 2
	)
	state := map[string]int{}
	var order []string
	var visit func(name string, chain []string) error
	visit = func(name string, chain []string) error {
		switch state[name] {
		case done:
			return nil
		case visiting:
			return fmt.Errorf("module dependency cycle: %s -> %s", strings.Join(chain, " -> "), name)
		}
		if ix.builtin[name] {
			state[name] = done
			return nil
		}
		path, ok := ix.path[name]
		if !ok {
			return fmt.Errorf("module %q is neither in modules.dep nor built in", name)
		}
		state[name] = visiting
		for _, d := range ix.deps[name] {
			if err := visit(d, append(chain, name)); err != nil {
				return err
			}
		}
		state[name] = done
		order = append(order, path)
		return nil
	}
	for _, n := range names {
		if err := visit(normalizeModule(n), nil); err != nil {
			return nil, err
		}
	}
	return order, nil
}
