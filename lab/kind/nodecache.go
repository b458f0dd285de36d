package kind

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"

	"sigs.k8s.io/kind/pkg/cluster/nodes"
)

// What every command reads of a cluster's nodes, in one docker call. kind's node asks the engine again each time
// it is asked its role or its addresses (a docker inspect each, about 0.1 s here, more on Docker Desktop), and a
// command asks for them many times: `get nodes` made 25 docker calls. inspectedNode answers from one docker
// inspect of all the cluster's nodes, made when the nodes are listed, with kind's own templates.

// roleLabel is the container label kind records a node's role in (kind's nodeRoleLabelKey).
const roleLabel = "io.x-k8s.kind.role"

// inspectedNode is a kind node whose role and addresses were read when it was listed.
type inspectedNode struct {
	nodes.Node
	role, ipv4, ipv6 string
}

func (n *inspectedNode) Role() (string, error)                     { return n.role, nil }
func (n *inspectedNode) IP() (ipv4 string, ipv6 string, err error) { return n.ipv4, n.ipv6, nil }

// inspected returns ns with their roles and addresses read in one docker inspect; a node the engine does not
// describe as kind would keeps asking for itself (kind's own errors).
func inspected(ns []nodes.Node) []nodes.Node {
	if len(ns) == 0 {
		return ns
	}
	// kind's Role and IP templates, one line per node after its name.
	format := fmt.Sprintf(`{{.Name}}	{{index .Config.Labels %q}}	{{range .NetworkSettings.Networks}}{{.IPAddress}},{{.GlobalIPv6Address}}{{end}}`, roleLabel)
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
	read := map[string]*inspectedNode{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			continue
		}
		ips := strings.Split(f[2], ",")
		if len(ips) != 2 { // not one network: kind's IP says why
			continue
		}
		read[strings.TrimPrefix(f[0], "/")] = &inspectedNode{role: f[1], ipv4: ips[0], ipv6: ips[1]}
	}
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
