package ebpf

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
)

// NodeConfigPath is where Cilium's agent writes the macros it compiles the node's programs with (its state
// directory, /var/run/cilium/state, hostPath-mounted from the node).
const NodeConfigPath = "/var/run/cilium/state/globals/node_config.h"

// ReadNodeConfig reads the macros of a node_config.h the walk needs.
func ReadNodeConfig(path string) (*NodeConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	nc, err := ParseNodeConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	nc.Path = path
	return nc, nil
}

// ParseNodeConfig reads node_config.h's #define lines (pkg/datapath/linux/config writes one per macro).
func ParseNodeConfig(data []byte) (*NodeConfig, error) {
	defines := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "#define" {
			defines[f[1]] = strings.Join(f[2:], " ")
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(defines) == 0 {
		return nil, fmt.Errorf("no #define lines: not Cilium's node_config.h")
	}
	nc := &NodeConfig{}
	_, nc.TunnelMode = defines["TUNNEL_MODE"]
	switch {
	case defines["ENABLE_SOCKET_LB_HOST_ONLY"] != "":
		nc.SocketLB = SocketLBHostOnly
	case defines["ENABLE_SOCKET_LB_FULL"] != "":
		nc.SocketLB = SocketLBFull
	}
	return nc, nil
}
