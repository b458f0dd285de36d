//go:build linux

package e2etest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/engines"
	"github.com/k8sguide/k8sguide/internal/linediff"
	"github.com/k8sguide/k8sguide/lab"
)

// One lab, many checks: bringing a lab up (a control plane, a proxy per node, the pods) is most of what an
// end-to-end test costs, and most tests only read a lab or restore what they change. SharedLab hands such tests
// one lab per dataplane per test binary, as Kubernetes' e2e suite and Cilium's connectivity test share a
// cluster. A test that must break or reshape a lab (faults, interrupts, node counts, --nodeport-addresses,
// port ranges, the LB algorithm) brings up its own with UpLab, and says why in a comment.
//
// What a shared lab is, checked before every test that takes it: the default shape (3 nodes), the web
// Deployment with 3 ready pods exposed as the NodePort Service web (`deploy`, `nodeport`), every node answering
// on that NodePort from the client. What a test may change: objects of its own, which it deletes at its end
// (DeleteAtCleanup), and web's replicas, which it scales back (ScaleBackAtCleanup). After each test the lab's
// Deployments and Services must be what they were before it, or the test fails and the lab is taken down, so
// that the next test gets a fresh one.

// sharedLab is one shared lab's record.
type sharedLab struct {
	name string
	// objects is the lab's Deployments and Services as the fixture left them, one line each (objectsOf).
	objects []string
	// broken says why the lab can no longer be handed out ("" while it can).
	broken string
}

var (
	sharedMu   sync.Mutex
	sharedLabs = map[dataplanes.Name]*sharedLab{}
	// sharedUps counts the shared labs brought up (a broken one is replaced), for the closing line.
	sharedUps int
)

// SharedLab returns the name of this test binary's shared lab of dataplane d, bringing it up on first use, and
// checks it healthy first: it fails the test (t.Fatal) when it is not, rather than let the test judge a broken
// lab. At the test's end (its cleanups run first, LIFO) it checks the test left the lab's objects as it found
// them. The lab is taken down at the end of the test binary (Main).
func SharedLab(t *testing.T, d dataplanes.Name) string {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	s := sharedLabs[d]
	if s != nil && s.broken != "" {
		t.Logf("shared lab %s is replaced: %s", s.name, s.broken)
		for _, problem := range takeDown(s.name) {
			t.Error(problem)
		}
		delete(sharedLabs, d)
		s = nil
	}
	if s == nil {
		s = &sharedLab{name: SharedName(d)}
		start := time.Now()
		if err := upShared(t, s.name, d); err != nil {
			// Whatever was made goes now: a half-made lab is not handed to the next test either.
			K8sguide(t, "down", "--name", s.name)
			t.Fatalf("bringing up the shared %s lab %s: %v", d, s.name, err)
		}
		sharedUps++
		objects, err := objectsOf(t.Context(), s.name)
		if err != nil {
			K8sguide(t, "down", "--name", s.name)
			t.Fatalf("reading the shared lab %s: %v", s.name, err)
		}
		s.objects = objects
		sharedLabs[d] = s
		t.Logf("shared lab %s (%s) brought up in %s", s.name, d, time.Since(start).Round(time.Millisecond))
	}
	if err := healthy(t.Context(), s.name); err != nil {
		s.broken = "unhealthy before " + t.Name() + ": " + err.Error()
		t.Fatalf("the shared lab %s is not healthy before this test: %v", s.name, err)
	}
	t.Cleanup(func() { checkRestored(t, s) })
	return s.name
}

// SharedName is the name of this test binary's shared lab of dataplane d: sh, the first three letters of the
// package (the binary's name, tracer.test: "tra"), and the dataplane's short name. Packages' test binaries run
// side by side and a lab's namespaces are named after it, so the names must differ between packages.
func SharedName(d dataplanes.Name) string {
	pkg := strings.TrimSuffix(filepath.Base(os.Args[0]), ".test")
	if len(pkg) > 3 {
		pkg = pkg[:3]
	}
	short := string(d)
	if face, ok := engines.Lab(d); ok {
		short = face.Short
	}
	return "sh" + pkg + "-" + short
}

func upShared(t *testing.T, name string, d dataplanes.Name) error {
	for _, args := range [][]string{
		{"up", "--name", name, "--dataplane", string(d)},
		{"deploy", "--name", name},
		{"nodeport", "--name", name, "--check", "0"},
	} {
		if _, err := K8sguide(t, args...); err != nil {
			return err
		}
	}
	return nil
}

// healthy checks what every test of a shared lab relies on: its 3 nodes, web's 3 ready pods, and web's
// NodePort answering on every node (3 connections each, from the client: every node's proxy serves it).
func healthy(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	p := Provider()
	st, err := p.Status(ctx, name)
	if err != nil {
		return err
	}
	if len(st.Nodes) != 3 {
		return fmt.Errorf("%d nodes, want 3", len(st.Nodes))
	}
	w, err := p.Workloads(ctx, name)
	if err != nil {
		return err
	}
	deps, err := w.Deployments(ctx)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(deps, func(d appsv1.Deployment) bool { return d.Namespace == "default" && d.Name == "web" })
	if i < 0 || deps[i].Status.ReadyReplicas != 3 || deps[i].Spec.Replicas == nil || *deps[i].Spec.Replicas != 3 {
		return fmt.Errorf("web has not 3 ready pods of 3 (%s)", describeWeb(deps, i))
	}
	port, err := webNodePort(ctx, name)
	if err != nil {
		return err
	}
	for _, n := range st.Nodes {
		addr := net.JoinHostPort(n.IP, strconv.Itoa(port))
		if pr := lab.ProbeAddr(ctx, p, name, addr, 3); pr.Failures != 0 || pr.Made != 3 {
			return fmt.Errorf("web's NodePort on %s (%s): %d of %d connections failed: %s", n.Name, addr, pr.Failures, pr.Made, pr.LastErr)
		}
	}
	return nil
}

func describeWeb(deps []appsv1.Deployment, i int) string {
	if i < 0 {
		return "no Deployment default/web"
	}
	want := "unset"
	if r := deps[i].Spec.Replicas; r != nil {
		want = strconv.Itoa(int(*r))
	}
	return fmt.Sprintf("%d ready, %s wanted", deps[i].Status.ReadyReplicas, want)
}

func webNodePort(ctx context.Context, name string) (int, error) {
	w, err := Provider().Workloads(ctx, name)
	if err != nil {
		return 0, err
	}
	svcs, err := w.Services(ctx)
	if err != nil {
		return 0, err
	}
	for _, s := range svcs {
		if s.Namespace == "default" && s.Name == "web" && len(s.Spec.Ports) > 0 && s.Spec.Ports[0].NodePort != 0 {
			return int(s.Spec.Ports[0].NodePort), nil
		}
	}
	return 0, fmt.Errorf("no NodePort Service default/web")
}

// objectsOf lists a lab's Deployments and Services, one line each with what a test could change of them
// (replicas; type, ports, policies, affinity), sorted, and how many pods it has (a deleted Deployment's pods
// must be gone too).
func objectsOf(ctx context.Context, name string) ([]string, error) {
	w, err := Provider().Workloads(ctx, name)
	if err != nil {
		return nil, err
	}
	deps, err := w.Deployments(ctx)
	if err != nil {
		return nil, err
	}
	svcs, err := w.Services(ctx)
	if err != nil {
		return nil, err
	}
	pods, err := w.Pods(ctx)
	if err != nil {
		return nil, err
	}
	lines := []string{fmt.Sprintf("pods: %d", len(pods))}
	for _, d := range deps {
		replicas := "unset"
		if d.Spec.Replicas != nil {
			replicas = strconv.Itoa(int(*d.Spec.Replicas))
		}
		lines = append(lines, fmt.Sprintf("deployment %s/%s replicas %s", d.Namespace, d.Name, replicas))
	}
	for _, s := range svcs {
		var ports []string
		for _, p := range s.Spec.Ports {
			ports = append(ports, fmt.Sprintf("%s:%d:%s:%d", p.Protocol, p.Port, p.TargetPort.String(), p.NodePort))
		}
		lines = append(lines, fmt.Sprintf("service %s/%s %s %s eTP=%s affinity=%s ports %s", s.Namespace, s.Name, s.Spec.Type,
			s.Spec.ClusterIP, s.Spec.ExternalTrafficPolicy, s.Spec.SessionAffinity, strings.Join(ports, ",")))
	}
	slices.Sort(lines)
	return lines, nil
}

// checkRestored fails t when it left the shared lab's objects changed, and marks the lab broken so that the
// next test gets a fresh one.
func checkRestored(t *testing.T, s *sharedLab) {
	t.Helper()
	changes, err := changesOf(s, time.Minute)
	sharedMu.Lock()
	defer sharedMu.Unlock()
	switch {
	case err != nil:
		s.broken = "its objects could not be read after " + t.Name() + ": " + err.Error()
		t.Errorf("the shared lab %s after this test: %v", s.name, err)
	case changes != "":
		s.broken = "changed by " + t.Name()
		t.Errorf("this test left the shared lab %s changed (it must delete what it made and restore what it changed):\n%s",
			s.name, changes)
	}
}

// changesOf is what differs in the shared lab's objects from what the fixture left ("" once they are the same
// again, waiting up to wait for that: deleted objects take a moment to go, a Deployment's pods, a namespace's
// objects).
func changesOf(s *sharedLab, wait time.Duration) (string, error) {
	var now []string
	var err error
	for deadline := time.Now().Add(wait); ; time.Sleep(500 * time.Millisecond) {
		now, err = objectsOf(context.Background(), s.name)
		if err == nil && slices.Equal(now, s.objects) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return "", err
	}
	return linediff.Sets(s.objects, now), nil
}

// SharedLabChanges is what the fixture would find changed in shared lab name if the test ended now, waiting up
// to wait for it to be as the fixture left it: the test of the fixture itself.
func SharedLabChanges(t *testing.T, name string, wait time.Duration) string {
	t.Helper()
	sharedMu.Lock()
	var s *sharedLab
	for _, l := range sharedLabs {
		if l.name == name {
			s = l
		}
	}
	sharedMu.Unlock()
	if s == nil {
		t.Fatalf("%s is not a shared lab of this test binary", name)
	}
	changes, err := changesOf(s, wait)
	if err != nil {
		t.Fatal(err)
	}
	return changes
}

// DeleteAtCleanup deletes objects a test made in a shared lab (KIND/NAME, as kubectl takes them, in namespace
// default) at its end, waiting for them to go, whether it passed or not; SharedLab then checks they went.
func DeleteAtCleanup(t *testing.T, name string, objects ...string) {
	t.Helper()
	t.Cleanup(func() { Delete(t, name, objects...) })
}

// Delete deletes objects (KIND/NAME, in namespace default) from lab name and waits for them to go.
func Delete(t testing.TB, name string, objects ...string) {
	t.Helper()
	if len(objects) == 0 {
		return
	}
	args := append([]string{"kubectl", "--name", name, "--", "delete", "--ignore-not-found", "--wait", "--timeout=2m"}, objects...)
	if _, err := K8sguide(t, args...); err != nil {
		t.Errorf("deleting what the test made in %s: %v", name, err)
	}
}

// ScaleBackAtCleanup scales a shared lab's web Deployment back to its 3 replicas at the test's end, for a test
// that scales it.
func ScaleBackAtCleanup(t *testing.T, name string) {
	t.Helper()
	t.Cleanup(func() {
		if _, err := K8sguide(t, "scale", "--name", name, "--replicas", "3"); err != nil {
			t.Errorf("scaling web back to 3 in %s: %v", name, err)
		}
	})
}

// ReleaseSharedLabs takes this test binary's shared labs down now, for a test that must find no other lab in
// the state directory (a later test brings them up again).
func ReleaseSharedLabs(t testing.TB) {
	t.Helper()
	if err := downShared(); err != nil {
		t.Error(err)
	}
}

// downShared takes every shared lab down, at the end of the test binary or before a test that wants the
// machine's cores (the IPVS test VM), and reports what is left of them.
func downShared() error {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	var problems []string
	for d, s := range sharedLabs {
		problems = append(problems, takeDown(s.name)...)
		delete(sharedLabs, d)
	}
	if sharedUps > 0 {
		fmt.Fprintf(os.Stderr, "e2etest: %d shared lab(s) brought up by this test binary\n", sharedUps)
	}
	if len(problems) > 0 {
		return fmt.Errorf("taking the shared labs down:\n%s", strings.Join(problems, "\n"))
	}
	return nil
}

// takeDown takes a shared lab down and says what went wrong and what is left of it.
func takeDown(name string) []string {
	var problems []string
	if _, err := Quiet("down", "--name", name); err != nil {
		problems = append(problems, err.Error())
	}
	return append(problems, Leftovers(name)...)
}
