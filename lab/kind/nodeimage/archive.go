package nodeimage

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// repositoriesFirst copies the docker archive raw to out with a repositories file naming every ref (the legacy
// format kind reads tags from) as its first entry, and no other repositories file. kind's build reads an
// archive's tags from whichever of manifest.json and repositories comes first, and from manifest.json only its
// first image: with several images in one archive, only repositories names them all. ids maps each ref to its
// image ID (what the legacy format records beside the tag).
func repositoriesFirst(raw, out string, refs []string, ids map[string]string) error {
	repos := map[string]map[string]string{}
	for _, ref := range refs {
		repo, tag, ok := splitRef(ref)
		if !ok {
			return fmt.Errorf("image %q has no tag", ref)
		}
		if repos[repo] == nil {
			repos[repo] = map[string]string{}
		}
		repos[repo][tag] = ids[ref]
	}
	meta, err := json.Marshal(repos)
	if err != nil {
		return err
	}
	in, err := os.Open(raw)
	if err != nil {
		return err
	}
	defer in.Close()
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	if err := tw.WriteHeader(&tar.Header{Name: "repositories", Mode: 0o644, Size: int64(len(meta)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write(meta); err != nil {
		return err
	}
	tr := tar.NewReader(in)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", raw, err)
		}
		if h.Name == "repositories" {
			continue
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

// splitRef splits registry/name:tag at the tag's colon (not a registry port's).
func splitRef(ref string) (repo, tag string, ok bool) {
	i := strings.LastIndexByte(ref, ':')
	if i < 0 || strings.Contains(ref[i:], "/") {
		return "", "", false
	}
	return ref[:i], ref[i+1:], true
}

// staticBase is the distroless-like layer the control plane's images start from: what a static Go program may
// read (the CA bundle, passwd and group with root and nobody, nsswitch.conf) and a /tmp, taken from the userland
// tree's tar.
func staticBase(userlandTar string) (map[string][]byte, error) {
	want := map[string]string{
		"./etc/ssl/certs/ca-certificates.crt": "etc/ssl/certs/ca-certificates.crt",
		"./etc/nsswitch.conf":                 "etc/nsswitch.conf",
	}
	files := map[string][]byte{
		"etc/passwd": []byte("root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"),
		"etc/group":  []byte("root:x:0:\nnobody:x:65534:\n"),
		"tmp/":       nil,
	}
	f, err := os.Open(userlandTar)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if to, ok := want[h.Name]; ok && h.Typeflag == tar.TypeReg {
			if files[to], err = io.ReadAll(tr); err != nil {
				return nil, err
			}
			delete(want, h.Name)
		}
	}
	if len(want) > 0 {
		return nil, fmt.Errorf("%s lacks %v", userlandTar, want)
	}
	return files, nil
}

// writeLayer writes files (name → content; a name ending in / is a directory, 1777 for tmp/) as a tar whose
// regular files are 0755 when they are programs (ELF) and 0644 otherwise, owned by root.
func writeLayer(out string, files map[string][]byte) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	dirs := map[string]bool{}
	for _, n := range names {
		for d := filepath.Dir(strings.TrimSuffix(n, "/")); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	var dirNames []string
	for d := range dirs {
		dirNames = append(dirNames, d)
	}
	sort.Strings(dirNames)
	for _, d := range dirNames {
		if err := tw.WriteHeader(&tar.Header{Name: d + "/", Mode: 0o755, Typeflag: tar.TypeDir}); err != nil {
			return err
		}
	}
	for _, n := range names {
		if strings.HasSuffix(n, "/") {
			mode := int64(0o755)
			if n == "tmp/" {
				mode = 0o1777
			}
			if err := tw.WriteHeader(&tar.Header{Name: n, Mode: mode, Typeflag: tar.TypeDir}); err != nil {
				return err
			}
			continue
		}
		data := files[n]
		mode := int64(0o644)
		if len(data) > 4 && string(data[:4]) == "\x7fELF" {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: mode, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

// gzipTar writes the files below dir as a gzipped tar (kind's release tarball). Stored, not compressed: kind only
// unpacks it again, and most of it is image layers.
func gzipTar(dir, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	zw, err := gzip.NewWriterLevel(f, gzip.NoCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			h.Name += "/"
		}
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		_, err = io.Copy(tw, in)
		return err
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return f.Close()
}

// readFromTarGz reads one file of a gzipped tar.
func readFromTarGz(archive, name string) ([]byte, error) {
	f, err := os.Open(archive)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s holds no %s", archive, name)
		}
		if err != nil {
			return nil, err
		}
		if h.Name == name {
			return io.ReadAll(tr)
		}
	}
}

// copyFiles copies the regular files directly in from (not below) into to, with mode.
func copyFiles(from, to string, mode os.FileMode) error {
	entries, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(to, 0o755); err != nil {
		return err
	}
	for _, e := range entries {
		if e.Type().IsRegular() {
			if err := copyFile(filepath.Join(from, e.Name()), filepath.Join(to, e.Name()), mode); err != nil {
				return err
			}
		}
	}
	return nil
}

func copyFile(from, to string, mode os.FileMode) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	os.Remove(to) // a symlink there (Debian's alternatives) is replaced, not followed
	if err := os.WriteFile(to, data, mode); err != nil {
		return err
	}
	return os.Chmod(to, mode)
}

func appendFile(file, text string) error {
	f, err := os.OpenFile(file, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// symlink makes link point at target, replacing whatever link was.
func symlink(target, link string) error {
	os.Remove(link)
	return os.Symlink(target, link)
}

// clearDir removes what dir holds, keeping dir.
func clearDir(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}
