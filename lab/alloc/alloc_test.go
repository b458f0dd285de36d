package alloc

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func nodePortService(name string, nodePort int32) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       v1.ServiceSpec{Type: v1.ServiceTypeNodePort, Ports: []v1.ServicePort{{Port: 80, NodePort: nodePort, Protocol: v1.ProtocolTCP}}},
	}
}

// Seed 002: for 30000-32767 the static band is 30000-30085 (min(max(16, 2768/32), 128) = 86 ports) and dynamic
// allocation uses 30086-32767 while it has room.
func TestDynamicNodePortsComeFromUpperBand(t *testing.T) {
	a, err := New("10.96.0.0/16", "30000-32767", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 500; i++ {
		svc := nodePortService("s", 0)
		if err := a.Allocate(svc); err != nil {
			t.Fatal(err)
		}
		if np := svc.Spec.Ports[0].NodePort; np < 30086 || np > 32767 {
			t.Fatalf("dynamic nodePort %d is outside the dynamic band 30086-32767", np)
		}
		if svc.Spec.ClusterIP == "" || !strings.HasPrefix(svc.Spec.ClusterIP, "10.96.") {
			t.Fatalf("clusterIP %q not from 10.96.0.0/16", svc.Spec.ClusterIP)
		}
	}
}

// In 30000-30031 (32 ports) the static band is min(max(16, 32/32), 128) = 16 ports, so the dynamic band is
// 30016-30031; once it is full, dynamic allocation falls back to the static band.
func TestDynamicFallsBackToStaticBandWhenUpperIsFull(t *testing.T) {
	a, err := New("10.96.0.0/16", "30000-30031", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 32; i++ {
		svc := nodePortService("s", 0)
		if err := a.Allocate(svc); err != nil {
			t.Fatalf("allocation %d: %v", i, err)
		}
		np := svc.Spec.Ports[0].NodePort
		if i < 16 && np < 30016 {
			t.Fatalf("allocation %d got %d from the static band while the dynamic band had room", i, np)
		}
		if i >= 16 && np >= 30016 {
			t.Fatalf("allocation %d got %d: the dynamic band should be full", i, np)
		}
	}
	err = a.Allocate(nodePortService("full", 0))
	if err == nil || !strings.Contains(err.Error(), "range is full") {
		t.Fatalf("33rd allocation: got %v, want range is full", err)
	}
}

func TestExplicitNodePort(t *testing.T) {
	existing := []v1.Service{*nodePortService("minio", 30009)}
	existing[0].Spec.ClusterIP = "10.96.0.10"
	a, err := New("10.96.0.0/16", "30000-32767", existing)
	if err != nil {
		t.Fatal(err)
	}
	ok := nodePortService("api", 30010)
	if err := a.Allocate(ok); err != nil || ok.Spec.Ports[0].NodePort != 30010 {
		t.Fatalf("explicit free port: %v", err)
	}
	for _, tc := range []struct {
		port int32
		want string
	}{
		{30009, `Service "web" is invalid: spec.ports[0].nodePort: Invalid value: 30009: provided port is already allocated`},
		{29999, `Service "web" is invalid: spec.ports[0].nodePort: Invalid value: 29999: provided port is not in the valid range. The range of valid ports is 30000-32767`},
	} {
		svc := nodePortService("web", tc.port)
		err := a.Allocate(svc)
		if err == nil || err.Error() != tc.want {
			t.Errorf("nodePort %d: got %v, want %s", tc.port, err, tc.want)
		}
	}
	// A failed allocation releases what it took: the ClusterIP it drew is free again, so a retry works.
	if err := a.Allocate(nodePortService("web", 30011)); err != nil {
		t.Fatal(err)
	}
}

func TestExistingCollisionsAreReported(t *testing.T) {
	a := []v1.Service{*nodePortService("a", 30001), *nodePortService("b", 30001)}
	if _, err := New("10.96.0.0/16", "30000-32767", a); err == nil {
		t.Fatal("two existing services on one nodePort were accepted")
	}
	if _, err := ParsePortRange("32767-30000"); err == nil {
		t.Fatal("inverted range accepted")
	}
}
