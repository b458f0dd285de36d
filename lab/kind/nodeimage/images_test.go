package nodeimage

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestImagesTheLessonsUse: every container image the shipped scenarios name is one the offline node image holds
// (web's nginx, pinned): a lesson that names another would wait for a pull that never comes on a node with no
// registry. Read from the scenarios' files, which the binary embeds.
func TestImagesTheLessonsUse(t *testing.T) {
	files, err := filepath.Glob("../../../scenarios/lessons/*")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../../scenarios/web.yaml")
	held := map[string]bool{NginxImage: true}
	apiserver, cm, sched, proxy, etcd, coredns, pause := Images()
	for _, i := range []string{apiserver, cm, sched, proxy, etcd, coredns, pause} {
		held[i] = true
	}
	image := regexp.MustCompile(`(?m)^\s*(?:-\s*)?image:\s*["']?([^"'\s#]+)`)
	found := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range image.FindAllStringSubmatch(string(b), -1) {
			found++
			if ref := fullRef(m[1]); !held[ref] {
				t.Errorf("%s names image %s (%s), which the offline node image does not hold", filepath.Base(f), m[1], ref)
			}
		}
	}
	if found == 0 {
		t.Fatal("no image found in the scenarios: the pattern no longer reads them")
	}
}

// fullRef spells a reference as containerd stores it: docker.io/library/nginx:1.22.1 for nginx:1.22.1.
func fullRef(r string) string {
	name, _, _ := strings.Cut(r, ":")
	if !strings.Contains(name, "/") {
		r = "library/" + r
	}
	if first, _, _ := strings.Cut(r, "/"); !strings.ContainsAny(first, ".:") && first != "localhost" {
		r = "docker.io/" + r
	}
	return r
}
