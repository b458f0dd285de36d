package run_test

import (
	"os"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/ipvs"
	"github.com/k8sguide/k8sguide/internal/e2etest"
	"github.com/k8sguide/k8sguide/internal/vmtest"
	"github.com/k8sguide/k8sguide/scenarios/run"
)

// vmScenariosEnv asks for TestIPVSScenariosInVM. `make scenarios-ipvs` sets it and runs that test on its own: a
// second VM booted while the tracer's runs would halve both on two cores. (Alone: 6 to 14 minutes from boot to
// power-off on two emulated CPUs, for two labs, which is why .ci/run leaves it out.)
const vmScenariosEnv = "K8SGUIDE_IPVS_VM_SCENARIOS"

// TestIPVSScenarios runs the shipped NodePort and ClusterIP lessons on the ipvs dataplane, where the kernel has
// IPVS; on a kernel without it, TestIPVSScenariosInVM runs it in the IPVS test VM.
func TestIPVSScenarios(t *testing.T) {
	e2etest.NeedRoot(t, "ipset", "iptables-restore", "xtables-monitor", "nft")
	if err := ipvs.CheckKernel(); err != nil {
		t.Skipf("%v: TestIPVSScenariosInVM runs this in the IPVS test VM (make scenarios-ipvs)", err)
	}
	for _, lab := range []string{"kgsv-nodeport-ipvs", "kgsv-clusterip-ipvs"} {
		e2etest.DownAtCleanup(t, lab)
	}
	r, code, _ := scenarioRun(t, "nodeport", "clusterip", "--dataplane", "ipvs", "--lab-prefix", "kgsv")
	for _, c := range r.Cells {
		for _, ch := range c.Checks {
			if ch.Status != run.Pass {
				t.Errorf("%s on ipvs, step %d %q: %s %s %+v", c.Scenario, ch.Step, ch.Title, ch.Status, ch.Error, ch.Mismatches)
			}
		}
		if c.Error != "" {
			t.Errorf("%s on ipvs: %s", c.Scenario, c.Error)
		}
	}
	if code != 0 || len(r.Cells) != 2 {
		t.Errorf("exit status %d, %d cells; want 0 and 2", code, len(r.Cells))
	}
}

func TestIPVSScenariosInVM(t *testing.T) {
	if os.Getenv(vmScenariosEnv) == "" && !vmtest.InGuest() {
		t.Skipf("make scenarios-ipvs runs this (with %s=1), on its own", vmScenariosEnv)
	}
	e2etest.InVM(t, "^TestIPVSScenarios$")
}
