package tracer_test

import (
	"testing"

	"github.com/k8sguide/k8sguide/internal/e2etest"
)

// The ipvs case of TestTraceAgreesWithKernel, on a kernel that has IPVS: Debian's, under QEMU, with a whole netns
// lab inside (some 16 minutes on two emulated CPUs). It is this package's last test (files run in name order),
// so that on CI it mostly runs once the other packages are done and the machine's cores are its own.
func TestTraceAgreesWithKernelInVM(t *testing.T) {
	e2etest.InVM(t, "^TestTraceAgreesWithKernel$/^ipvs$")
}
