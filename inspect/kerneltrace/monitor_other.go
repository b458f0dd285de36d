//go:build !linux

package kerneltrace

import "os/exec"

// dieWithParent does nothing off Linux: monitors only run inside a lab's (Linux) nodes; elsewhere this package
// builds for its parsers, which `trace` uses on any system.
func dieWithParent(*exec.Cmd) {}
