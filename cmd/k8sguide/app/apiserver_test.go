package app

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// fakeAPIServer serves the fake lab name (fakeLabs) an apiserver: its pod list holds pods (JSON items), and a
// request for anything else waits until the client gives up, as an apiserver that does not answer in time.
func fakeAPIServer(t *testing.T, name, pods string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/pods" || strings.HasSuffix(r.URL.Path, "/pods") {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[` + pods + `]}`))
			return
		}
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
	}))
	t.Cleanup(srv.Close)
	c := clientcmdapi.NewConfig()
	c.Clusters[name] = &clientcmdapi.Cluster{Server: srv.URL}
	c.AuthInfos[name] = &clientcmdapi.AuthInfo{}
	c.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	c.CurrentContext = name
	if err := clientcmd.WriteToFile(*c, filepath.Join(os.Getenv("K8SGUIDE_STATE_DIR"), name, "kubeconfig")); err != nil {
		t.Fatal(err)
	}
}

// TestConnectFromNoSuchPod: `connect --from pod/nosuch` exited 0 with a table of failed connections.
func TestConnectFromNoSuchPod(t *testing.T) {
	fakeLabs(t, "k36")
	fakeAPIServer(t, "k36", `{"metadata":{"name":"web-1","namespace":"default"}}`)
	status, out, errOut := run("connect", "10.96.0.1:80", "--from", "pod/nosuch")
	if status == 0 || errOut != "ERROR: --from pod/nosuch: no such pod, nor a pod of a Deployment nosuch (pods: web-1)\n" || out != "" {
		t.Errorf("connect --from pod/nosuch: status %d, stdout %q, stderr %q; want one line naming the pod, non-zero", status, out, errOut)
	}
	status, _, errOut = run("connect", "10.96.0.1:80", "--from", "pod/other/web-1")
	if status == 0 || !strings.Contains(errOut, "no such pod, nor a pod of a Deployment web-1 (no pods in namespace other)") {
		t.Errorf("connect --from pod/other/web-1 (it is in default): status %d, stderr %q", status, errOut)
	}
}

// TestInterruptedClientGo: Ctrl-C while client-go waits for the apiserver printed
// `Get "https://127.0.0.1:…/api/v1/…": context canceled`; it is one line saying "interrupted", status 130.
func TestInterruptedClientGo(t *testing.T) {
	fakeLabs(t, "k36")
	fakeAPIServer(t, "k36", "")
	for _, args := range [][]string{{"get", "services"}, {"nodeport", "--check", "5"}} {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(300*time.Millisecond, cancel)
		var out, errOut strings.Builder
		status := runContext(ctx, args, strings.NewReader(""), &out, &errOut)
		cancel()
		e := errOut.String()
		if status != ExitInterrupted || !strings.HasPrefix(e, "ERROR: interrupted") || strings.Count(e, "\n") != 1 ||
			strings.Contains(e, "context canceled") || strings.Contains(e, "http://") {
			t.Errorf("%q interrupted: status %d, stderr %q; want one line \"ERROR: interrupted…\", status %d", args, status, e, ExitInterrupted)
		}
		t.Logf("%q: %q", args, e)
	}
}
