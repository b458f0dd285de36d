package helminstall

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf/chart"

	"github.com/k8sguide/k8sguide/dataplanes/ebpf/datapath"
)

// The offline install (chart.Options.Local): the chart of Cilium's sources rendered with the lab's options must name
// no image but the two make cilium-images builds, run no Envoy, route natively over the pod subnet, and grant no
// capability the nodes cannot.
func TestRenderLocal(t *testing.T) {
	o := chart.Options{ClusterName: "kind", PodSubnet: "10.244.0.0/16", Local: true, WithoutCapabilities: []string{"SYS_RESOURCE"}}
	manifest, err := Render(chartDir(t), o)
	if err != nil {
		t.Fatal(err)
	}
	agent, operator := datapath.LocalImages()
	var images []string
	for _, m := range regexp.MustCompile(`(?m)^\s*image: "?([^"\s]+)"?\s*$`).FindAllStringSubmatch(manifest, -1) {
		if !slices.Contains(images, m[1]) {
			images = append(images, m[1])
		}
	}
	slices.Sort(images)
	want := []string{agent, operator}
	slices.Sort(want)
	if !slices.Equal(images, want) {
		t.Errorf("the manifest names images %q, want only %q (nothing from a registry)", images, want)
	}
	r := parseManifest(t, manifest)
	if r.kinds["DaemonSet"] != 1 {
		t.Errorf("%d DaemonSets, want the agent's only (no Envoy)", r.kinds["DaemonSet"])
	}
	for k, want := range map[string]string{
		"routing-mode": "native", "auto-direct-node-routes": "true", "ipv4-native-routing-cidr": "10.244.0.0/16",
		"enable-l7-proxy": "false", "kube-proxy-replacement": "true",
	} {
		if got := r.config.Data[k]; got != want {
			t.Errorf("cilium-config %s = %q, want %q", k, got, want)
		}
	}
	if strings.Contains(manifest, "SYS_RESOURCE") {
		t.Error("the manifest still grants SYS_RESOURCE")
	}
	// The rest of the agent's capabilities stay as the chart has them.
	caps := r.agent.Spec.Template.Spec.Containers[0].SecurityContext.Capabilities.Add
	if !slices.Contains(caps, "NET_ADMIN") || !slices.Contains(caps, "SYS_ADMIN") {
		t.Errorf("agent capabilities %v lost more than SYS_RESOURCE", caps)
	}

	// The published chart's way (no Local): Cilium's images from quay.io.
	manifest, err = Render(chartDir(t), chart.Options{ClusterName: "kind"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(manifest, "quay.io/cilium/cilium:"+datapath.CiliumVersion) || strings.Contains(manifest, datapath.LocalAgentRepository) {
		t.Error("without Local the manifest should run quay.io/cilium/cilium and no local image")
	}
}

func TestValuesSocketLBAndRouting(t *testing.T) {
	v, err := chart.Values(chart.Options{ClusterName: "kind", NoSocketLB: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := v["socketLB"]; got == nil || got.(map[string]any)["enabled"] != false {
		t.Errorf("NoSocketLB: socketLB = %v, want enabled false", got)
	}
	if _, ok := v["routingMode"]; ok {
		t.Error("no PodSubnet: routingMode set, want the chart's default (tunnel)")
	}
	if _, err := chart.Values(chart.Options{ClusterName: "kind", PodSubnet: "10.244.0.0"}); err == nil {
		t.Error("PodSubnet without a prefix length accepted")
	}
}
