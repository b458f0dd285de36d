//go:build !linux

package datapath

import "os/exec"

// dieWithParent does nothing off Linux: the datapath is compiled for a Linux lab only; elsewhere this package
// builds for what `trace` reads of it.
func dieWithParent(*exec.Cmd) {}
