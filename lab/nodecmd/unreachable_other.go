//go:build !linux

package nodecmd

import "net/netip"

// watchUnreachable needs a Linux packet socket; elsewhere it watches nothing.
func watchUnreachable(netip.AddrPort, uint16) func(bool) string {
	return func(bool) string { return "" }
}
