package run_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	junitparser "github.com/joshdk/go-junit"

	"github.com/k8sguide/k8sguide/internal/e2etest"
	"github.com/k8sguide/k8sguide/scenarios/run"
)

func TestMain(m *testing.M) { os.Exit(e2etest.Main(m)) }

// scenarioRun runs `k8sguide scenario run args...` and returns its report (-o json is added), its exit status and
// stderr (the progress lines).
func scenarioRun(t *testing.T, args ...string) (*run.Report, int, string) {
	t.Helper()
	cmd := exec.Command(e2etest.Binary, append(append([]string{"scenario", "run"}, args...), "-o", "json")...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	t.Logf("$ k8sguide scenario run %s\n%s", strings.Join(args, " "), errb.String())
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var r run.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("the report: %v\n%s", err, out.String())
	}
	return &r, code, errb.String()
}

// TestWrongExpectationsFail gives every kind of check an expectation the lab does not meet, and checks that each
// fails with what was expected and what came, that the run exits 1, and that the lab is gone.
func TestWrongExpectationsFail(t *testing.T) {
	e2etest.NeedRoot(t, "iptables-restore")
	const lab = "kgscw-wrong-ipt"
	e2etest.DownAtCleanup(t, lab)
	file := filepath.Join(t.TempDir(), "wrong.yaml")
	os.WriteFile(file, []byte(`apiVersion: k8sguide.io/v1alpha1
kind: Scenario
metadata: {name: wrong}
lab: {dataplanes: [iptables], workers: 1}
steps:
- deploy: {replicas: 2}
- expose: {deployment: web, nodePort: 30080}
- name: connect
  connect:
    to: "${node.worker}:${service.web.nodePort}"
    count: 4
    expect: {answered: none, source: client}
- name: trace
  trace:
    node: worker
    dst: "${node.worker}:${service.web.nodePort}"
    expect: {verdict: dropped, chances: [0.9, 0.1], snat: none, notes: [no such note]}
- name: object
  object: {get: service/web, path: "{.spec.ports[0].nodePort}", expect: {between: [31000, 31999]}}
- name: refusal
  expose: {deployment: web, service: web2, nodePort: 30081, expectError: "already allocated"}
`), 0o644)
	r, code, _ := scenarioRun(t, file, "--lab-prefix", "kgscw")
	if code != 1 {
		t.Errorf("exit status %d, want 1 (a check failed)", code)
	}
	if len(r.Cells) != 1 {
		t.Fatalf("cells %+v, want one", r.Cells)
	}
	got := map[string][]string{}
	for _, ch := range r.Cells[0].Checks {
		if ch.Status != run.Fail {
			t.Errorf("check %q: %s (%s), want fail", ch.Title, ch.Status, ch.Error)
		}
		for _, m := range ch.Mismatches {
			if m.Expected == "" || m.Actual == "" {
				t.Errorf("check %q: %s: expected %q, actual %q: both must be said", ch.Title, m.What, m.Expected, m.Actual)
			}
			got[ch.Title] = append(got[ch.Title], m.What+": expected "+m.Expected+", got "+m.Actual)
		}
	}
	for title, want := range map[string][]string{
		"connect": {"answered: expected none (0 of 4), got 4 of 4", "source the pods saw: expected client: the sender's own address 172.18.0.1, got "},
		"trace":   {"verdict: expected dropped, got delivered", "chances: expected [0.9 0.1], got [0.5000, 0.5000]", "source the endpoints see: expected none: the packet's own source 172.18.0.1, got ", `note: expected "no such note", got `},
		"object":  {"{.spec.ports[0].nodePort}: expected a number from 31000 to 31999, got \"30080\""},
		"refusal": {`refusal: expected refused: "already allocated", got the Service was created`},
	} {
		if len(got[title]) != len(want) {
			t.Errorf("check %q: mismatches %q, want %d of them", title, got[title], len(want))
			continue
		}
		for i, w := range want {
			if !strings.HasPrefix(got[title][i], w) {
				t.Errorf("check %q:\n got %s\nwant %s…", title, got[title][i], w)
			}
		}
	}
	e2etest.AssertNothingLeft(t, lab)
}

// TestShippedScenario runs two shipped lessons of the default lab on an nftables lab the test made (scenario
// run --lab): one after another, the lab put back as the runner found it after each and left up; a lesson that
// asks for another lab does not run on it, and says why. It writes JUnit and reads it back with a JUnit parser,
// as a CI system would. (The runner's own labs, shared between lessons, are make scenarios'.)
func TestShippedScenario(t *testing.T) {
	e2etest.NeedRoot(t, "nft")
	// A lab of its own, not the package's shared one: the lessons deploy web themselves, on a lab as up left it.
	const lab = "kgscs-nft"
	e2etest.UpLab(t, lab, "--dataplane", "nftables")
	before := e2etest.MustK8sguide(t, "get", "nodes", "--name", lab)
	xml := filepath.Join(t.TempDir(), "junit.xml")
	r, code, progress := scenarioRun(t, "nodeport", "clusterip", "--lab", lab, "--junit", xml)
	if code != 0 {
		t.Errorf("exit status %d, want 0: %+v", code, r.Cells)
	}
	if len(r.Cells) != 2 || r.Cells[0].Lab != lab || r.Cells[1].Lab != lab {
		t.Fatalf("cells %+v, want nodeport and clusterip on lab %s", r.Cells, lab)
	}
	if strings.Contains(progress, "up: lab ") || strings.Contains(progress, "down: lab ") {
		t.Errorf("the run brought a lab up or took one down; --lab runs on the lab given:\n%s", progress)
	}
	for _, lesson := range []string{"nodeport", "clusterip"} {
		if !strings.Contains(progress, "["+lesson+"/nftables] put back: the lesson's ") {
			t.Errorf("the runner did not say it put the lab back after %s:\n%s", lesson, progress)
		}
	}
	if after := e2etest.MustK8sguide(t, "get", "nodes", "--name", lab); after != before {
		t.Errorf("the lab's nodes before the run:\n%s\nafter:\n%s", before, after)
	}
	suites, err := junitparser.IngestFile(xml)
	if err != nil {
		t.Fatalf("reading the JUnit file back: %v", err)
	}
	if len(suites) != 2 || suites[0].Name != "nodeport/nftables" || suites[1].Name != "clusterip/nftables" {
		t.Fatalf("suites %+v, want nodeport/nftables and clusterip/nftables", suites)
	}
	for i, s := range suites {
		if s.Totals.Tests != len(r.Cells[i].Checks) || s.Totals.Passed != s.Totals.Tests || s.Totals.Tests < 3 {
			t.Errorf("suite %s totals %+v, want every one of the %d checks passed", s.Name, s.Totals, len(r.Cells[i].Checks))
		}
		for _, tc := range s.Tests {
			if strings.Contains(tc.Name, "trace") && !strings.Contains(tc.SystemOut, `"result": "agree"`) {
				t.Errorf("test case %q: system-out lacks the verification:\n%s", tc.Name, tc.SystemOut)
			}
		}
	}

	// A lesson whose lab has another NodePort range: not run on this one.
	r, code, _ = scenarioRun(t, "nodeport-range", "--lab", lab)
	want := "not run on lab " + lab + ": the scenario asks for NodePort range "
	if code != 2 || len(r.Cells) != 1 || r.Cells[0].Status != run.Error || !strings.HasPrefix(r.Cells[0].Error, want) || len(r.Cells[0].Checks) != 0 {
		t.Errorf("nodeport-range on lab %s: exit %d, cells %+v; want exit 2 and one cell %q…", lab, code, r.Cells, want)
	}
	e2etest.MustK8sguide(t, "down", "--name", lab)
	e2etest.AssertNothingLeft(t, lab)
}

// TestInterruptedRunLeavesNothing sends SIGINT (Ctrl-C) to a run in the middle of its steps.
func TestInterruptedRunLeavesNothing(t *testing.T) {
	e2etest.NeedRoot(t, "iptables-restore")
	const lab = "kgsci-nodeport-ipt"
	e2etest.DownAtCleanup(t, lab)
	cmd := exec.Command(e2etest.Binary, "scenario", "run", "nodeport", "--dataplane", "iptables", "--lab-prefix", "kgsci")
	stderr, _ := cmd.StderrPipe()
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	var said []string
	interrupted := false
	for sc.Scan() {
		said = append(said, sc.Text())
		if !interrupted && strings.Contains(sc.Text(), "step 3:") {
			cmd.Process.Signal(syscall.SIGINT)
			interrupted = true
		}
	}
	err := cmd.Wait()
	t.Logf("stderr:\n%s\nstdout:\n%s", strings.Join(said, "\n"), out.String())
	if !interrupted {
		t.Fatal("the run never reached step 3")
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Errorf("exit: %v, want status 2 (the scenario could not run)", err)
	}
	time.Sleep(100 * time.Millisecond)
	e2etest.AssertNothingLeft(t, lab)
}
