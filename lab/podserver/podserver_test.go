package podserver

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHandlerReportsPodAndClient(t *testing.T) {
	srv := httptest.NewServer(Handler("web-1", "k8s-guide-worker"))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	pod, client, err := ParseReply(resp.Header)
	if err != nil || pod != "web-1" || !strings.HasPrefix(client, "127.0.0.1:") {
		t.Fatalf("pod %q client %q err %v", pod, client, err)
	}
	if _, _, err := ParseReply(http.Header{"Server": {"nginx"}}); err == nil {
		t.Fatal("an answer without the pod header was taken for a lab pod's")
	}
}
