package tracer_test

import (
	"testing"

	"github.com/k8sguide/k8sguide/internal/e2etest"
)

// The ipvs case of TestTraceAgreesWithKernel, on a kernel that has IPVS: Debian's, under QEMU, with a whole netns
// lab inside (some 16 minutes on two emulated CPUs). It is this package's last test (files run in name order),
// so that on CI it mostly runs once the other packages are done and the machine's cores are its own. (Tried: run
// from the start beside inspect/tracer's and lab/netns's labs, as a package of its own under go test -p 3, its
// lab's control plane timed out starting, and lab/netns took 1138 s instead of 874: two cores run two lab
// packages flat out already.)
func TestTraceAgreesWithKernelInVM(t *testing.T) {
	e2etest.InVM(t, "^TestTraceAgreesWithKernel$/^ipvs$")
}
