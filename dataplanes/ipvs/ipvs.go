// Package ipvs is the kube-proxy IPVS engine: the collector of a node's IPVS state (virtual servers, real servers,
// connection entries) and the walk of a packet through it. (The upstream ipvs proxier itself is in kubeproxy.)
package ipvs

import (
	"errors"
	"fmt"
	"os"
)

// procIPVS exists when the kernel has IPVS (CONFIG_IP_VS), built in or loaded.
const procIPVS = "/proc/sys/net/ipv4/vs"

// ErrNoKernelSupport says this kernel has no IPVS.
var ErrNoKernelSupport = errors.New("this kernel has no IPVS (no " + procIPVS + "); use --provider kind on a host whose kernel has IPVS, or the project's IPVS test VM")

// CheckKernel tells whether this kernel can run an IPVS dataplane.
func CheckKernel() error {
	if _, err := os.Stat(procIPVS); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return ErrNoKernelSupport
		}
		return fmt.Errorf("checking for IPVS: %w", err)
	}
	return nil
}
