package kind

import (
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

// TestReadInspect reads inspected's docker inspect output: the lines below are Docker 28.2.2's CLI on engine
// 20.10.24 (the private kind engine here), for a 3-node cluster, as inspected's format prints them.
func TestReadInspect(t *testing.T) {
	out := "/pk-worker2\tworker\t172.18.0.6,fc00:f853:ccd:e793::6\t<no value>\t\n" +
		"/pk-control-plane\tcontrol-plane\t172.18.0.5,fc00:f853:ccd:e793::5\t<no value>\t127.0.0.1 32825;\n" +
		"/pk-worker\tworker\t172.18.0.7,fc00:f853:ccd:e793::7\t\t\n"
	read := readInspect(out)
	if len(read) != 3 {
		t.Fatalf("read %d nodes of 3: %v", len(read), read)
	}
	cp := read["pk-control-plane"]
	if cp.role != "control-plane" || cp.ipv4 != "172.18.0.5" || cp.ipv6 != "fc00:f853:ccd:e793::5" || cp.apiServer != "127.0.0.1:32825" {
		t.Errorf("control plane: %+v", *cp)
	}
	if w := read["pk-worker"]; w.role != "worker" || w.apiServer != "" {
		t.Errorf("worker (last line, ending in a tab): %+v", *w)
	}
	// Docker Desktop's label is kind's answer before the port mapping; an IPv6 binding is bracketed.
	read = readInspect("/d-control-plane\tcontrol-plane\t172.18.0.2,\t10.0.1.7:6443\t127.0.0.1 40000;\n" +
		"/v6-control-plane\tcontrol-plane\t172.18.0.3,\t\t::1 40001;0.0.0.0 40002;\n" +
		"/two-networks\tworker\t172.18.0.4,172.19.0.4,\t\t\n/short\tworker\n")
	if got := read["d-control-plane"].apiServer; got != "10.0.1.7:6443" {
		t.Errorf("Docker Desktop's label: %q", got)
	}
	if got := read["v6-control-plane"].apiServer; got != "[::1]:40001" {
		t.Errorf("the first binding, IPv6: %q", got)
	}
	if _, ok := read["two-networks"]; ok {
		t.Error("a node on two networks was read (kind's IP says why it cannot be)")
	}
	if _, ok := read["short"]; ok {
		t.Error("a line of two fields was read")
	}
}

// TestKindKubeconfig: kubeadm's admin.conf becomes kind's kubeconfig, every name kind-NAME and the server the
// host's, as kind's KINDFromRawKubeadm makes it; anything but one cluster, user and context is refused.
func TestKindKubeconfig(t *testing.T) {
	adminConf := `apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: Q0E=
    server: https://pk-control-plane:6443
  name: kubernetes
contexts:
- context:
    cluster: kubernetes
    user: kubernetes-admin
  name: kubernetes-admin@kubernetes
current-context: kubernetes-admin@kubernetes
kind: Config
users:
- name: kubernetes-admin
  user:
    client-certificate-data: Q0VSVA==
    client-key-data: S0VZ
`
	out, err := kindKubeconfig([]byte(adminConf), "pk", "https://127.0.0.1:32825")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CurrentContext != "kind-pk" || len(cfg.Clusters) != 1 || len(cfg.AuthInfos) != 1 || len(cfg.Contexts) != 1 {
		t.Fatalf("names: %s", out)
	}
	c, u, x := cfg.Clusters["kind-pk"], cfg.AuthInfos["kind-pk"], cfg.Contexts["kind-pk"]
	if c == nil || u == nil || x == nil {
		t.Fatalf("not named kind-pk:\n%s", out)
	}
	if c.Server != "https://127.0.0.1:32825" || string(c.CertificateAuthorityData) != "CA" {
		t.Errorf("cluster: %+v", c)
	}
	if string(u.ClientCertificateData) != "CERT" || string(u.ClientKeyData) != "KEY" {
		t.Errorf("user: %+v", u)
	}
	if x.Cluster != "kind-pk" || x.AuthInfo != "kind-pk" {
		t.Errorf("context: %+v", x)
	}
	if _, err := clientcmd.RESTConfigFromKubeConfig([]byte(out)); err != nil {
		t.Errorf("not a usable kubeconfig: %v", err)
	}
	two := strings.Replace(adminConf, "contexts:\n", "contexts:\n- context: {cluster: kubernetes, user: kubernetes-admin}\n  name: other\n", 1)
	if _, err := kindKubeconfig([]byte(two), "pk", "https://127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "one cluster, user and context") {
		t.Errorf("two contexts: %v", err)
	}
}
