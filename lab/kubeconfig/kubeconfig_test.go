package kubeconfig

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func labConfig() *clientcmdapi.Config {
	c := clientcmdapi.NewConfig()
	c.Clusters["k"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:6443"}
	c.AuthInfos["k"] = &clientcmdapi.AuthInfo{ClientKeyData: []byte("SECRET-ADMIN-KEY")}
	c.Contexts["k"] = &clientcmdapi.Context{Cluster: "k", AuthInfo: "k"}
	c.CurrentContext = "k"
	return c
}

// `up --kubeconfig FILE` on an unrelated file overwrote it with the lab's admin key, at the file's old mode.
func TestMergeKubeconfigRefusesOtherFiles(t *testing.T) {
	dir := t.TempDir()
	for _, content := range []string{
		"foo: bar\n", // clientcmd takes any YAML mapping for an empty kubeconfig
		"services:\n  web:\n    image: nginx\n",
		"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n",
		"127.0.0.1 localhost\n",
		"root:x:0:0:root:/root:/bin/bash\n",
		"\x7fELF\x02\x01\x01\x00",
	} {
		path := filepath.Join(dir, "notes")
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		err := Merge(path, "netns-k", labConfig())
		var nk *NotKubeconfigError
		if !errors.As(err, &nk) {
			t.Errorf("%q: Merge = %v, want a NotKubeconfigError", content, err)
		} else if strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: error is not one line: %q", content, err)
		}
		if got, _ := os.ReadFile(path); !bytes.Equal(got, []byte(content)) {
			t.Errorf("%q: the file was changed to %q", content, got)
		}
		if err := Check(path); err == nil {
			t.Errorf("%q: Check accepted it", content)
		}
		// down never touches it either.
		if err := Remove(path, "netns-k"); err != nil {
			t.Errorf("%q: Remove = %v, want it left alone quietly", content, err)
		}
		if got, _ := os.ReadFile(path); !bytes.Equal(got, []byte(content)) {
			t.Errorf("%q: Remove changed it to %q", content, got)
		}
	}
}

// A kubeconfig the lab writes its key into is 0600, whatever it was.
func TestMergeKubeconfigWrites0600(t *testing.T) {
	dir := t.TempDir()
	other := clientcmdapi.NewConfig()
	other.Clusters["prod"] = &clientcmdapi.Cluster{Server: "https://prod:6443"}
	other.AuthInfos["prod"] = &clientcmdapi.AuthInfo{Token: "t"}
	other.Contexts["prod"] = &clientcmdapi.Context{Cluster: "prod", AuthInfo: "prod"}
	other.CurrentContext = "prod"
	existing := filepath.Join(dir, "existing")
	if err := clientcmd.WriteToFile(*other, existing); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(existing, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{existing, filepath.Join(dir, "new", "config"), filepath.Join(dir, "empty")} {
		if strings.HasSuffix(path, "empty") {
			os.WriteFile(path, []byte("# nothing yet\n"), 0o666)
			os.Chmod(path, 0o666)
		}
		if err := Merge(path, "netns-k", labConfig()); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v after the lab's key was written into it, want 0600", path, fi.Mode().Perm())
		}
		c, err := clientcmd.LoadFromFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if c.CurrentContext != "netns-k" || string(c.AuthInfos["netns-k"].ClientKeyData) != "SECRET-ADMIN-KEY" {
			t.Errorf("%s: the lab's context is not in it: %+v", path, c)
		}
		if path == existing && c.Contexts["prod"] == nil {
			t.Errorf("%s: the other context was lost", path)
		}
	}
	// Through a symbolic link: the link stays, its target is written, 0600.
	link := filepath.Join(dir, "link")
	if err := os.Symlink(existing, link); err != nil {
		t.Fatal(err)
	}
	os.Chmod(existing, 0o644)
	if err := Remove(link, "netns-k"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v %v", fi, err)
	}
	if fi, _ := os.Stat(existing); fi.Mode().Perm() != 0o600 {
		t.Errorf("the link's target: mode %v, want 0600", fi.Mode().Perm())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 4 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("left behind in the directory: %v", names)
	}
}
