package deploy

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/k8sguide/k8sguide/lab"
	"github.com/k8sguide/k8sguide/lab/workload"
)

// TestPrintApplied: one replica is "1 replica" (GitHub issue 17), as the guide's `make deployment` makes; what
// was there before is "configured", as kubectl apply says (issue 38: deploy said "created" when it replaced the
// guide's Deployment).
func TestPrintApplied(t *testing.T) {
	one, three := int32(1), int32(3)
	m := &workload.Manifest{
		Deployments: []*appsv1.Deployment{
			{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: appsv1.DeploymentSpec{Replicas: &one}},
			{ObjectMeta: metav1.ObjectMeta{Name: "api"}, Spec: appsv1.DeploymentSpec{Replicas: &three}},
		},
		Services: []*v1.Service{{ObjectMeta: metav1.ObjectMeta{Name: "web"}}},
	}
	for _, d := range m.Deployments {
		d.Namespace = "default"
	}
	m.Services[0].Namespace = "default"
	var out bytes.Buffer
	printApplied(&out, m, map[string]bool{"deployment.apps/default/api": true, "service/other/web": true, "deployment.apps/kube-system/web": true})
	want := "deployment.apps/web created (1 replica)\ndeployment.apps/api configured (3 replicas)\nservice/web created\n"
	if out.String() != want {
		t.Errorf("got\n%swant\n%s", out.String(), want)
	}
}

// TestRefusesHugeManifest: a manifest past workload.MaxManifest is refused in one line naming the file, its size
// and the limit, before a byte of it is parsed or a lab is asked (a 200 MB manifest took 2.7 GB; issue 36); a
// stream is read no further than the limit.
func TestRefusesHugeManifest(t *testing.T) {
	big := filepath.Join(t.TempDir(), "big.yaml")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(200 << 20); err != nil { // sparse: the test does not write 200 MB
		t.Fatal(err)
	}
	f.Close()
	for _, tc := range []struct {
		args []string
		in   io.Reader
		want string
	}{
		{[]string{big}, nil, big + ": 200 MB is too big for a lab manifest (k8sguide reads up to 8.0 MB; a manifest of 10,000 Services is about 2 MB)"},
		{[]string{"-"}, io.LimitReader(zeros{}, 1<<30), "standard input: over 8.0 MB is too big for a lab manifest (k8sguide reads up to 8.0 MB; a manifest of 10,000 Services is about 2 MB)"},
	} {
		var out, errOut bytes.Buffer
		in := tc.in
		if in == nil {
			in = strings.NewReader("")
		}
		cmd := NewCommand(lab.Streams{In: in, Out: &out, Err: &errOut})
		cmd.SetArgs(tc.args)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		err := cmd.Execute()
		if err == nil || err.Error() != tc.want {
			t.Errorf("deploy %v: %v\nwant %s", tc.args, err, tc.want)
		}
	}
}

// zeros is a stream of spaces with no end, as a pipe from a runaway program.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}
