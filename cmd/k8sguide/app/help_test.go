package app

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/k8sguide/k8sguide/inspect/render"
	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/kind"
)

// TestHelpFits: every command's --help fits a 100- and an 80-column terminal (issue 38: they were 147–190
// columns), and a long example still reads as one command line (its continuation ends the line with a
// backslash).
func TestHelpFits(t *testing.T) {
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		if c.Hidden {
			return
		}
		paths = append(paths, path)
		for _, sub := range c.Commands() {
			walk(sub, append(append([]string(nil), path...), sub.Name()))
		}
	}
	walk(NewCommand(lab.Streams{In: strings.NewReader(""), Out: &bytes.Buffer{}, Err: &bytes.Buffer{}}), nil)
	if len(paths) < 20 {
		t.Fatalf("found %d commands: the walk is broken", len(paths))
	}
	for _, width := range []int{100, 80} {
		t.Setenv("COLUMNS", strconv.Itoa(width))
		for _, path := range paths {
			var out, errOut bytes.Buffer
			if code := runContext(context.Background(), append(path, "--help"), strings.NewReader(""), &out, &errOut); code != 0 {
				t.Fatalf("%v --help: exit %d: %s", path, code, errOut.String())
			}
			lines := strings.Split(out.String(), "\n")
			for i, line := range lines {
				if w := render.TextWidth(line); w > width {
					t.Errorf("k8sguide %s --help at %d columns: a line of %d: %q", strings.Join(path, " "), width, w, line)
				}
				// A paragraph's line of a word or two between two full ones: a break of the source's, kept.
				if i > 0 && i+1 < len(lines) && render.TextWidth(lines[i-1]) > width-25 && render.TextWidth(line) < 25 &&
					line != "" && continuesParagraph(lines[i+1]) && !strings.HasSuffix(line, ":") {
					t.Errorf("k8sguide %s --help at %d columns: a ragged line %q between %q and %q", strings.Join(path, " "), width, line, lines[i-1], lines[i+1])
				}
				if strings.HasSuffix(line, " \\") && (i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "    ")) {
					t.Errorf("k8sguide %s --help: a continued example with no continuation: %q", strings.Join(path, " "), line)
				}
			}
		}
	}
}

// TestVersion: --version says the tool's version and the versions of what its labs run, exit 0 (it printed
// the help before).
func TestVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := runContext(context.Background(), []string{"--version"}, strings.NewReader(""), &out, &errOut); code != 0 || errOut.Len() > 0 {
		t.Fatalf("--version: exit %d, stderr %q", code, errOut.String())
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^k8sguide \S`),
		regexp.MustCompile(`(?m)^Kubernetes v` + regexp.QuoteMeta(kind.DefaultKubernetesVersion) + ` `),
		regexp.MustCompile(`(?m)^Cilium v\d+\.\d+\.\d+ `),
		regexp.MustCompile(`(?m)^kind v\d+\.\d+\.\d+ `),
	} {
		if !want.MatchString(out.String()) {
			t.Errorf("--version says:\n%s\nwant a line matching %s", out.String(), want)
		}
	}
	// The Kubernetes it names is the one go.mod builds the netns lab from.
	gomod, err := os.ReadFile("../../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^\s*k8s\.io/kubernetes v` + regexp.QuoteMeta(kind.DefaultKubernetesVersion) + `\b`).Match(gomod) {
		t.Errorf("go.mod requires another k8s.io/kubernetes than v%s, which --version names", kind.DefaultKubernetesVersion)
	}
	if strings.Contains(out.String(), "Usage:") {
		t.Errorf("--version printed the help:\n%s", out.String())
	}
}
