package invm_test

import (
	"os"
	"testing"

	"github.com/k8sguide/k8sguide/internal/e2etest"
)

func TestMain(m *testing.M) {
	os.Exit(e2etest.Main(m))
}

// The ipvs case of inspect/tracer's TestTraceAgreesWithKernel, on a kernel that has IPVS: Debian's, under QEMU,
// with a whole netns lab inside (some 16 minutes on two emulated CPUs). The guest runs inspect/tracer's own test
// binary, built here.
func TestTraceAgreesWithKernelInVM(t *testing.T) {
	e2etest.InVMOf(t, "github.com/k8sguide/k8sguide/inspect/tracer", "^TestTraceAgreesWithKernel$/^ipvs$")
}
