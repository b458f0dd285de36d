package deploy

import (
	"bytes"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/k8sguide/k8sguide/lab/workload"
)

// TestPrintCreated: one replica is "1 replica" (GitHub issue 17), as the guide's `make deployment` makes.
func TestPrintCreated(t *testing.T) {
	one, three := int32(1), int32(3)
	m := &workload.Manifest{
		Deployments: []*appsv1.Deployment{
			{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: appsv1.DeploymentSpec{Replicas: &one}},
			{ObjectMeta: metav1.ObjectMeta{Name: "api"}, Spec: appsv1.DeploymentSpec{Replicas: &three}},
		},
		Services: []*v1.Service{{ObjectMeta: metav1.ObjectMeta{Name: "web"}}},
	}
	var out bytes.Buffer
	printCreated(&out, m)
	want := "deployment.apps/web created (1 replica)\ndeployment.apps/api created (3 replicas)\nservice/web created\n"
	if out.String() != want {
		t.Errorf("got\n%swant\n%s", out.String(), want)
	}
}
