package kind

import (
	"bytes"
	"fmt"
	"net"
	"os/exec"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"
)

// What every command reads of a cluster's nodes, in one docker call. kind's node asks the engine again each time
// it is asked its role or its addresses (a docker inspect each, about 0.1 s here, more on Docker Desktop), and a
// command asks for them many times: `get nodes` made 25 docker calls. inspectedNode answers from one docker
// inspect of all the cluster's nodes, made when the nodes are listed, with kind's own templates.

// roleLabel is the container label kind records a node's role in (kind's nodeRoleLabelKey).
const roleLabel = "io.x-k8s.kind.role"

// apiServerPort is the API server's port inside a node (kind's common.APIServerInternalPort), and
// desktopPortLabel the label Docker Desktop may put on a container for it (read first, as kind does).
const (
	apiServerPort    = "6443/tcp"
	desktopPortLabel = "desktop.docker.io/ports/" + apiServerPort
)

// inspectedNode is a kind node whose role and addresses were read when it was listed.
type inspectedNode struct {
	nodes.Node
	role, ipv4, ipv6 string
	// apiServer is where this host reaches the API server through this node, as kind's GetAPIServerEndpoint
	// finds it (HOST:PORT); empty when the node publishes no API server port (workers).
	apiServer string
}

func (n *inspectedNode) Role() (string, error)                     { return n.role, nil }
func (n *inspectedNode) IP() (ipv4 string, ipv6 string, err error) { return n.ipv4, n.ipv6, nil }

// inspected returns ns with their roles and addresses read in one docker inspect; a node the engine does not
// describe as kind would keeps asking for itself (kind's own errors).
func inspected(ns []nodes.Node) []nodes.Node {
	if len(ns) == 0 {
		return ns
	}
	// kind's Role and IP templates, one line per node after its name, then its GetAPIServerEndpoint's two
	// (Docker Desktop's label, else the first host binding of the API server port; with, not kind's index ... 0,
	// so that a worker, which publishes no port, does not fail the whole inspect).
	format := fmt.Sprintf(`{{.Name}}	{{index .Config.Labels %q}}	{{range .NetworkSettings.Networks}}{{.IPAddress}},{{.GlobalIPv6Address}}{{end}}`+
		`	{{index .Config.Labels %q}}	{{with index .NetworkSettings.Ports %q}}{{range .}}{{.HostIp}} {{.HostPort}};{{end}}{{end}}`,
		roleLabel, desktopPortLabel, apiServerPort)
	args := []string{"inspect", "--format", format}
	for _, n := range ns {
		args = append(args, n.String())
	}
	var out bytes.Buffer
	cmd := exec.Command("docker", args...)
	cmd.Stdout = &out
	if cmd.Run() != nil {
		return ns
	}
	read := readInspect(out.String())
	out2 := make([]nodes.Node, len(ns))
	for i, n := range ns {
		out2[i] = n
		if r, ok := read[n.String()]; ok {
			r.Node = n
			out2[i] = r
		}
	}
	return out2
}

// readInspect reads inspected's docker inspect output: a node per line, by name (without Docker's leading /).
// A line that is not the five fields, or whose node is not on one network, is left out.
func readInspect(out string) map[string]*inspectedNode {
	read := map[string]*inspectedNode{}
	// Only newlines are trimmed: a worker's line ends in a tab (it publishes no port).
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 5 {
			continue
		}
		ips := strings.Split(f[2], ",")
		if len(ips) != 2 { // not one network: kind's IP says why
			continue
		}
		// A label the node lacks prints as nothing or, from some Docker CLIs, as "<no value>".
		n := &inspectedNode{role: f[1], ipv4: ips[0], ipv6: ips[1], apiServer: strings.TrimPrefix(f[3], "<no value>")}
		if first, _, _ := strings.Cut(f[4], ";"); n.apiServer == "" && first != "" {
			if host, port, ok := strings.Cut(first, " "); ok {
				n.apiServer = net.JoinHostPort(host, port)
			}
		}
		read[strings.TrimPrefix(f[0], "/")] = n
	}
	return read
}

// kubeconfigFrom is what kind's KubeConfig(name, false) returns (`kind get kubeconfig`), made from nodes that
// inspected read: the bootstrap control-plane node's admin.conf (one docker exec), its cluster, user and context
// named kind-NAME, its server the host's address of the API server. kind's own lists the nodes again and asks
// the engine for each one's role twice and for the port twice: 13 docker calls on every command that talks to
// the API server. ok is false when ns were not all read that way: then kind's own is the answer.
func kubeconfigFrom(name string, ns []nodes.Node) (kubeconfig string, ok bool, err error) {
	for _, n := range ns {
		if _, read := n.(*inspectedNode); !read {
			return "", false, nil
		}
	}
	cps, err := nodeutils.ControlPlaneNodes(ns)
	if err != nil || len(cps) == 0 {
		return "", false, nil
	}
	ep, err := nodeutils.APIServerEndpointNode(ns)
	if err != nil {
		return "", false, nil
	}
	apiServer := ep.(*inspectedNode).apiServer
	if apiServer == "" {
		return "", false, nil
	}
	var raw bytes.Buffer
	if err := cps[0].Command("cat", "/etc/kubernetes/admin.conf").SetStdout(&raw).Run(); err != nil {
		return "", true, fmt.Errorf("node %s: reading the cluster's kubeconfig: %w", cps[0], err)
	}
	kubeconfig, err = kindKubeconfig(raw.Bytes(), name, "https://"+apiServer)
	return kubeconfig, true, err
}

// kindKubeconfig is kind's KINDFromRawKubeadm: kubeadm's admin.conf (one cluster, user and context) with every
// name kind-NAME and the cluster's server set to server.
func kindKubeconfig(adminConf []byte, name, server string) (string, error) {
	cfg, err := clientcmd.Load(adminConf)
	if err != nil {
		return "", fmt.Errorf("the cluster's admin.conf: %w", err)
	}
	if len(cfg.Clusters) != 1 || len(cfg.AuthInfos) != 1 || len(cfg.Contexts) != 1 {
		return "", fmt.Errorf("kubeadm's admin.conf should have one cluster, user and context; it has %d, %d and %d",
			len(cfg.Clusters), len(cfg.AuthInfos), len(cfg.Contexts))
	}
	key := "kind-" + name // kind's KINDClusterKey
	out := clientcmdapi.NewConfig()
	for _, c := range cfg.Clusters {
		c.Server = server
		out.Clusters[key] = c
	}
	for _, u := range cfg.AuthInfos {
		out.AuthInfos[key] = u
	}
	for _, c := range cfg.Contexts {
		c.Cluster, c.AuthInfo = key, key
		out.Contexts[key] = c
	}
	out.CurrentContext = key
	b, err := clientcmd.Write(*out)
	return string(b), err
}
