package helminstall

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf/chart"

	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/registry"
)

// fakeRegistry serves one Helm chart the way an OCI registry (quay.io) does: an OCI image manifest whose
// config is the chart's metadata and whose one layer is the chart archive, under repo:tag.
type fakeRegistry struct {
	repo, tag string
	blobs     map[string][]byte // digest -> content
	manifest  []byte
	pulls     int
}

func digest(b []byte) string { return fmt.Sprintf("sha256:%x", sha256.Sum256(b)) }

func newFakeRegistry(t *testing.T, repo, tag string, archive []byte, metadata any) *fakeRegistry {
	t.Helper()
	config, err := json.Marshal(metadata)
	if err != nil {
		t.Fatal(err)
	}
	desc := func(mediaType string, b []byte) map[string]any {
		return map[string]any{"mediaType": mediaType, "digest": digest(b), "size": len(b)}
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        desc(registry.ConfigMediaType, config),
		"layers":        []any{desc(registry.ChartLayerMediaType, archive)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &fakeRegistry{repo: repo, tag: tag, manifest: manifest,
		blobs: map[string][]byte{digest(config): config, digest(archive): archive}}
}

func (f *fakeRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	prefix := "/v2/" + f.repo + "/"
	if !strings.HasPrefix(r.URL.Path, prefix) || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		http.NotFound(w, r)
		return
	}
	var body []byte
	switch rest := strings.TrimPrefix(r.URL.Path, prefix); {
	case rest == "manifests/"+f.tag || rest == "manifests/"+digest(f.manifest):
		body = f.manifest
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		if r.Method == http.MethodGet {
			f.pulls++
		}
	case strings.HasPrefix(rest, "blobs/") && f.blobs[strings.TrimPrefix(rest, "blobs/")] != nil:
		body = f.blobs[strings.TrimPrefix(rest, "blobs/")]
		w.Header().Set("Content-Type", "application/octet-stream")
	default:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Docker-Content-Digest", digest(body))
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	if r.Method == http.MethodGet {
		w.Write(body)
	}
}

// Install's pull path (registry.Client.Pull of chartRef's repo:tag, the archive loaded and checked) against
// a local registry serving the Cilium chart packaged from the sources.
func TestPullChart(t *testing.T) {
	if got, want := chartRef(), "quay.io/cilium/charts/cilium:"+chart.Version(); got != want {
		t.Fatalf("chartRef() = %q, want %q", got, want)
	}
	ch, err := LoadChart(chartDir(t))
	if err != nil {
		t.Fatal(err)
	}
	archivePath, err := chartutil.Save(ch, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	archive, err := os.ReadFile(archivePath)
	if err != nil {
		t.Fatal(err)
	}
	// Serve the chart under chartRef's repository path and tag.
	repo, tag, _ := strings.Cut(strings.TrimPrefix(chartRef(), "quay.io/"), ":")
	reg := newFakeRegistry(t, repo, tag, archive, ch.Metadata)
	srv := httptest.NewTLSServer(reg)
	defer srv.Close()
	ref := strings.Replace(chartRef(), "quay.io", strings.TrimPrefix(srv.URL, "https://"), 1)
	client := registry.ClientOptHTTPClient(srv.Client())
	credentials := registry.ClientOptCredentialsFile(t.TempDir() + "/config.json")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := pullChart(ctx, ref, client, credentials)
	if err != nil {
		t.Fatalf("pullChart(%s): %v", ref, err)
	}
	if got.Metadata.Version != chart.Version() || len(got.Templates) != len(ch.Templates) || len(got.Schema) == 0 {
		t.Errorf("pulled chart %s %s with %d templates and a %d-byte schema, want %s with %d templates and the schema",
			got.Metadata.Name, got.Metadata.Version, len(got.Templates), len(got.Schema), chart.Version(), len(ch.Templates))
	}
	if reg.pulls != 1 {
		t.Errorf("registry served the manifest %d times, want 1", reg.pulls)
	}

	// A tag the registry does not have fails with one line.
	_, err = pullChart(ctx, strings.TrimSuffix(ref, chart.Version())+"1.19.0", client, credentials)
	if err == nil || strings.Contains(oneLine(err), "\n") {
		t.Errorf("pulling a missing tag = %v", err)
	}

	// A cancelled context abandons the pull.
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	if _, err := pullChart(cctx, ref, client, credentials); err == nil {
		t.Error("pullChart with a cancelled context succeeded")
	}
}
