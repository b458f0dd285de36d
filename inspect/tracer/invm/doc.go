// Package invm runs inspect/tracer's ipvs agreement test (TestTraceAgreesWithKernel/ipvs) in the IPVS test VM:
// a kernel with IPVS under QEMU, where this machine's kernel has none. It is a package of its own, with nothing
// but that test, so that `go test ./...` runs the VM's 16 minutes beside inspect/tracer's other tests rather
// than after them (a package's tests run one after another).
package invm
