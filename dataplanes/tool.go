package dataplanes

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// Output runs one of the node's tools (iptables-save, nft, …) with argv, never through a shell, and returns what
// it printed; a failure carries the tool's own last words.
func Output(ctx context.Context, name string, args ...string) (string, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg == "" {
			return "", err
		}
		return "", fmt.Errorf("%v: %s", err, msg)
	}
	return out.String(), nil
}

// NeedsLinux is the error of a face that reads a Linux kernel (netlink, pinned BPF maps), asked on another
// system: a Mac builds k8sguide for the kind provider and offline traces, and has no node of its own to read.
func NeedsLinux(what string) error { return fmt.Errorf("%s needs Linux", what) }
