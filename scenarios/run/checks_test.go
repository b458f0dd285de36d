package run_test

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	junitparser "github.com/joshdk/go-junit"
	"go.yaml.in/yaml/v3"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
	"github.com/k8sguide/k8sguide/scenarios"
	"github.com/k8sguide/k8sguide/scenarios/run"
)

// The fixtures are what the commands printed in a run of the shipped nodeport scenario on iptables (netns lab
// scn-nodeport-ipt: worker2 is 172.18.0.4, its pod bridge 10.244.2.1; web's pods are s9qzx and xhpz9 on worker,
// jbph6 on worker2): `trace --verify -o json` on worker2, `connect -o json` to worker2's NodePort (30
// connections), `kubectl get service web -o json`.

var pods = []string{"default/web-7b49f5dc7-jbph6", "default/web-7b49f5dc7-s9qzx", "default/web-7b49f5dc7-xhpz9"}

func fixture[T any](t *testing.T, name string) T {
	t.Helper()
	data, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func expect[T any](t *testing.T, text string) T {
	t.Helper()
	var v T
	if err := yaml.Unmarshal([]byte(text), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// wrong runs a check with each wrong expectation and wants one mismatch naming both what was expected and what came.
func wrong(t *testing.T, cases map[string][2]string, check func(expectation string) []run.Mismatch) {
	t.Helper()
	for expectation, want := range cases {
		ms := check(expectation)
		if len(ms) != 1 {
			t.Errorf("%s: mismatches %+v, want one", expectation, ms)
			continue
		}
		if !strings.Contains(ms[0].Expected, want[0]) || !strings.Contains(ms[0].Actual, want[1]) {
			t.Errorf("%s:\n got expected %q, actual %q\nwant expected ~%q, actual ~%q", expectation, ms[0].Expected, ms[0].Actual, want[0], want[1])
		}
	}
}

func TestCheckTrace(t *testing.T) {
	v := fixture[trace.Verification](t, "nodeport-iptables-verify.json")
	out := run.TraceOutput{Trace: v.Prediction, Verification: &v}
	x := run.Expected{Pods: pods, NodeAddrs: []string{"172.18.0.4", "10.244.2.1"}}
	check := func(e string) []run.Mismatch { return run.CheckTrace(expect[scenarios.TraceExpect](t, e), x, out) }
	if ms := check("{verdict: delivered, endpoints: all, chances: equal, snat: node, verify: agree, notes: []}"); len(ms) > 0 {
		t.Errorf("the right expectation: %+v", ms)
	}
	wrong(t, map[string][2]string{
		"{verdict: dropped}":             {"dropped", "delivered"},
		"{chances: rr}":                  {"rr", "[0.3333, 0.3333, 0.3333]"},
		"{chances: [0.5, 0.25, 0.25]}":   {"[0.5 0.25 0.25]", "[0.3333, 0.3333, 0.3333]"},
		"{snat: none}":                   {"the packet's own source 172.18.0.1", "172.18.0.4 (to 10.244."},
		"{notes: [affinity]}":            {`"affinity"`, ""},
		"{endpoints: {nodes: [worker]}}": {"default/web-7b49f5dc7-s9qzx", "default/web-7b49f5dc7-jbph6"},
	}, func(e string) []run.Mismatch {
		x := x
		if strings.Contains(e, "nodes") {
			x.Pods = pods[1:] // the endpoints on worker
		}
		return run.CheckTrace(expect[scenarios.TraceExpect](t, e), x, out)
	})
	// remote: every endpoint here is elsewhere (SNAT to the node); one made local must then see the packet's own.
	if ms := check("{snat: remote}"); len(ms) > 0 {
		t.Errorf("remote, no local endpoint: %+v", ms)
	}
	local := x
	local.LocalPods = pods[:1]
	if ms := run.CheckTrace(expect[scenarios.TraceExpect](t, "{snat: remote}"), local, out); len(ms) != 1 || !strings.Contains(ms[0].Expected, "at the tracing node's pods") && !strings.Contains(ms[0].Expected, "at the node's own pods") {
		t.Errorf("remote with a local endpoint SNATed: %+v", ms)
	}
	v.Result, v.Reasons = "disagree", []string{"the kernel hit another rule"}
	if ms := run.CheckTrace(expect[scenarios.TraceExpect](t, "{verify: agree}"), x, out); len(ms) != 1 || !strings.Contains(ms[0].Actual, "disagree: the kernel hit another rule") {
		t.Errorf("a disagreeing verification: %+v", ms)
	}
}

func TestCheckConnect(t *testing.T) {
	out := fixture[run.ConnectOutput](t, "nodeport-iptables-connect.json")
	x := run.Expected{Pods: pods, NodeAddrs: []string{"172.18.0.4", "10.244.2.1"}, Sender: "172.18.0.1"}
	check := func(e string) []run.Mismatch { return run.CheckConnect(expect[scenarios.ConnectExpect](t, e), x, out) }
	if ms := check("{answered: all, pods: all, source: node}"); len(ms) > 0 {
		t.Errorf("the right expectation: %+v", ms)
	}
	wrong(t, map[string][2]string{
		"{answered: none}": {"none (0 of 30)", "30 of 30"},
		"{answered: 29}":   {"29 (29 of 30)", "30 of 30"},
		"{pods: one}":      {"one: the same endpoint every time", "web-7b49f5dc7-jbph6, web-7b49f5dc7-s9qzx, web-7b49f5dc7-xhpz9"},
		"{source: client}": {"the sender's own address 172.18.0.1", "saw 172.18.0.4"},
	}, check)
	// remote: the pods of the node sent to must see the client, the others the node. No pod here is local, so
	// every one seeing the node passes; with one of them local, that one must have seen the client.
	if ms := check("{source: remote}"); len(ms) > 0 {
		t.Errorf("remote, no local pod: %+v", ms)
	}
	local := x
	local.LocalPods = pods[:1]
	wrong(t, map[string][2]string{"{source: remote}": {"the sender's own address 172.18.0.1 at the node's own pods", pods[0][len("default/"):] + " saw 10.244.2.1"}}, func(e string) []run.Mismatch {
		return run.CheckConnect(expect[scenarios.ConnectExpect](t, e), local, out)
	})
	// hairpin:ADDR: a pod answering itself saw ADDR, every other the sender.
	self := x
	self.Sender, self.SenderPod = "172.18.0.4", pods[0]
	wrong(t, map[string][2]string{`{source: "hairpin:169.254.42.1"}`: {"answered itself 169.254.42.1", pods[0][len("default/"):] + " saw 10.244.2.1"}}, func(e string) []run.Mismatch {
		return run.CheckConnect(expect[scenarios.ConnectExpect](t, e), self, out)
	})
	none := x
	none.Pods = []string{} // what the runner resolves "none" to
	wrong(t, map[string][2]string{"{pods: none}": {"none: none", "web-7b49f5dc7-jbph6"}}, func(e string) []run.Mismatch {
		return run.CheckConnect(expect[scenarios.ConnectExpect](t, e), none, out)
	})
}

func TestCheckObject(t *testing.T) {
	data, err := os.ReadFile("testdata/service-web.json")
	if err != nil {
		t.Fatal(err)
	}
	check := func(e string) []run.Mismatch {
		oc := expect[scenarios.ObjectCheck](t, e)
		ms, err := run.CheckObject(&oc, data)
		if err != nil {
			t.Fatal(err)
		}
		return ms
	}
	if ms := check(`{get: service/web, path: "{.spec.ports[0].nodePort}", expect: {between: [30000, 32767]}}`); len(ms) > 0 {
		t.Errorf("the right expectation: %+v", ms)
	}
	wrong(t, map[string][2]string{
		`{get: service/web, path: "{.spec.ports[0].nodePort}", expect: {between: [31000, 31999]}}`: {"a number from 31000 to 31999", `"32371"`},
		`{get: service/web, path: "{.spec.type}", expect: {equals: ClusterIP}}`:                    {`"ClusterIP"`, `"NodePort"`},
		`{get: service/web, path: "{.spec.clusterIP}", expect: {matches: "^10\\.97\\."}}`:          {`to match ^10\.97\.`, `"10.96.`},
	}, check)
}

// TestJUnitReadsBack writes a report of every status as JUnit and reads it with a JUnit parser, as CI would.
func TestJUnitReadsBack(t *testing.T) {
	r := run.Report{Cells: []run.Cell{{
		Scenario: "lesson", Dataplane: "iptables", File: "lesson.yaml", Lab: "scn-lesson-ipt", Status: run.Error, Started: time.Now(),
		Error: "step 5 (line 30) could not run: boom",
		Checks: []run.Check{
			{Step: 2, Title: "passes", Status: run.Pass, Command: []string{"k8sguide", "trace"}, Output: `{"result": "agree"}`},
			{Step: 3, Title: "fails", Status: run.Fail, Mismatches: []run.Mismatch{{What: "verdict", Expected: "dropped", Actual: "delivered"}}},
			{Step: 4, Title: "known", Status: run.Known, KnownFailure: "issue 16", Mismatches: []run.Mismatch{{What: "verdict", Expected: "rejected", Actual: "dropped"}}},
			{Step: 5, Title: "errs", Status: run.Error, Error: "boom"},
			{Step: 6, Title: "after", Status: run.NotRun},
		},
	}}}
	suites := r.JUnit()
	var buf bytes.Buffer
	if err := suites.WriteXML(&buf); err != nil {
		t.Fatal(err)
	}
	got, err := junitparser.Ingest(buf.Bytes())
	if err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	if len(got) != 1 || got[0].Name != "lesson/iptables" {
		t.Fatalf("suites %+v", got)
	}
	status := map[string]junitparser.Status{}
	for _, tc := range got[0].Tests {
		status[tc.Name] = tc.Status
	}
	for name, want := range map[string]junitparser.Status{
		"step 2: passes": junitparser.StatusPassed, "step 3: fails": junitparser.StatusFailed,
		"step 4: known": junitparser.StatusSkipped, "step 5: errs": junitparser.StatusError,
		"step 6: after": junitparser.StatusSkipped, "lab": junitparser.StatusError,
	} {
		if status[name] != want {
			t.Errorf("%s: %s, want %s (all: %v)", name, status[name], want, status)
		}
	}
	if r.ExitCode() != 2 {
		t.Errorf("exit code %d, want 2", r.ExitCode())
	}
}

// TestMatrix prints a report of every kind of cell, and the lines that say why.
func TestMatrix(t *testing.T) {
	r := run.Report{Cells: []run.Cell{
		{Scenario: "a", Dataplane: "iptables", Status: run.Pass, Checks: []run.Check{{Status: run.Pass}}},
		{Scenario: "a", Dataplane: "ipvs", Status: run.Pass, Checks: []run.Check{{Step: 2, Title: "t", Status: run.Pass, Differs: "rr takes turns"}}},
		{Scenario: "a", Dataplane: "ebpf", Status: run.Pass, Checks: []run.Check{{Status: run.Pass}, {Step: 3, Title: "k", Status: run.Known, KnownFailure: "no bpf_lxc", Mismatches: []run.Mismatch{{What: "verdict", Expected: "delivered", Actual: "dropped"}}}}},
		{Scenario: "b", Dataplane: "iptables", File: "b.yaml", Status: run.Fail, Checks: []run.Check{{Status: run.Pass}, {Step: 4, Line: 20, Title: "f", Status: run.Fail, Mismatches: []run.Mismatch{{What: "answered", Expected: "all (3 of 3)", Actual: "0 of 3"}}}}},
		{Scenario: "b", Dataplane: "ebpf", Status: run.Error, Error: "the lab could not be made: boom"},
		{Scenario: "c", Dataplane: "iptables", Status: run.Pass, Retried: "step 1 (line 9) deploy: 2 of 3 replicas ready", Checks: []run.Check{{Status: run.Pass}}},
		{Scenario: "d", Dataplane: "ebpf", Status: run.Pass, Checks: []run.Check{{Step: 5, Title: "a node reaches the Service", Status: run.Known,
			KnownFailure: "the lab's nodes run no bpf_sock (Cilium's socket load balancer), so a connection the node itself makes to a ClusterIP is not translated (issue 16)",
			Mismatches:   []run.Mismatch{{What: "answered", Expected: "all (30 of 30)", Actual: "0 of 30"}}}}},
	}}
	var buf bytes.Buffer
	if err := r.Matrix(&buf); err != nil {
		t.Fatal(err)
	}
	got := buf.String()
	for _, want := range []string{
		"SCENARIO  IPTABLES        IPVS            EBPF",
		"a         pass            pass*           known 1/2",
		"b         FAIL 1/2        -               ERROR",
		"b on iptables, step 4 (b.yaml:20) \"f\": answered\n    expected all (3 of 3)\n    got      0 of 3",
		"b on ebpf: the lab could not be made: boom",
		"c         pass (2nd)",
		"c on iptables: run twice: the first time, step 1 (line 9) deploy: 2 of 3 replicas ready",
		"a on ipvs, step 2 \"t\":\n    rr takes turns",
		"a on ebpf, step 3 \"k\" FAILS, as known:\n    no bpf_lxc\n    (verdict: expected delivered, got dropped)",
		// A long reason is filled to 100 columns, its next lines two further in.
		"    the lab's nodes run no bpf_sock (Cilium's socket load balancer), so a connection the node\n      itself makes",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the matrix lacks %q:\n%s", want, got)
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if len(l) > 100 {
			t.Errorf("a line wider than 100 columns: %q", l)
		}
	}
}
