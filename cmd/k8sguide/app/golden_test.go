package app

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k8sguide/k8sguide/inspect/render"
	"github.com/k8sguide/k8sguide/internal/graphviztest"
	"github.com/k8sguide/k8sguide/internal/linediff"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// goldenCase is one offline command whose whole output (status, stdout, stderr) is pinned byte for byte.
type goldenCase struct {
	name string
	args []string
}

// goldenCases runs the offline commands a user without a lab runs: trace from a snapshot of each engine and from
// each pasted dump, in every output format, lb list, and a few refusals. Nothing here needs root or a lab.
func goldenCases() []goldenCase {
	const app = "testdata/"
	const ipt, nft, ipvs = "../../../dataplanes/iptables/testdata/", "../../../dataplanes/nftables/testdata/", "../../../dataplanes/ipvs/testdata/"
	const stg = "../../../inspect/stages/testdata/"
	traces := []goldenCase{
		{"iptables-nodeport", []string{"--snapshot", app + "iptables-worker2.v1.json", "--dst", "172.18.0.4:31758"}},
		{"iptables-nodeport-from-node", []string{"--snapshot", app + "iptables-worker2.v1.json", "--dst", "172.18.0.4:31758", "--from", "node"}},
		{"iptables-clusterip-from-pod", []string{"--snapshot", app + "iptables-worker2.v1.json", "--dst", "10.96.99.110:80", "--from", "pod/web-6b4fbbd7c4-97h9q"}},
		{"nftables-nodeport", []string{"--snapshot", app + "nftables-worker2.v1.json", "--dst", "172.18.0.4:30666"}},
		{"nftables-clusterip-from-pod", []string{"--snapshot", app + "nftables-worker2.v1.json", "--dst", "10.96.98.206:80", "--from", "pod/web-6b4fbbd7c4-vdgm8"}},
		{"ipvs-nodeport", []string{"--snapshot", ipvs + "vm-snapshot-traced.json", "--dst", "172.18.0.2:30080"}},
		{"ebpf-nodeport", []string{"--snapshot", app + "ebpf-worker2.v1.json", "--dst", "172.18.0.4:30464"}},
		{"ebpf-nodeport-source-port", []string{"--snapshot", app + "ebpf-worker2.v1.json", "--dst", "172.18.0.4:30464", "--src", "172.18.0.1:40001"}},
		{"pasted-iptables-save", []string{"--snapshot", ipt + "iptables-worker.save", "--local-addresses", "172.18.0.3,10.244.1.1", "--dst", "172.18.0.3:31103"}},
		{"pasted-iptables-save-fragment", []string{"--snapshot", ipt + "seed001-nodeport.save", "--dst", "192.168.1.10:30136", "--local-addresses", "192.168.1.10"}},
		{"pasted-iptables-listing", []string{"--snapshot", ipt + "seed000-nodeport.listing", "--dst", "172.18.0.3:30510", "--local-addresses", "172.18.0.3"}},
		{"pasted-nft-list-ruleset", []string{"--snapshot", nft + "nftables-worker.nft", "--local-addresses", "172.18.0.3,10.244.1.1", "--dst", "172.18.0.3:30696"}},
		{"pasted-nft-json", []string{"--snapshot", nft + "nftables-worker.json", "--local-addresses", "172.18.0.3,10.244.1.1", "--dst", "172.18.0.3:30696"}},
		{"pasted-ipvsadm", []string{"--snapshot", ipvs + "vm-ipvsadm-Ln.txt", "--local-addresses", "172.18.0.2", "--dst", "172.18.0.2:30080"}},
		// Issue 35: a traffic policy of Local, and a client session affinity holds, are said as such.
		{"nftables-etp-local", []string{"--snapshot", stg + "netns-nftables-etp-local-worker2.json", "--dst", "172.18.0.4:32242"}},
		{"nftables-affinity", []string{"--snapshot", stg + "netns-nftables-affinity-worker.json", "--dst", "172.18.0.3:32242"}},
	}
	var out []goldenCase
	for _, c := range traces {
		for _, format := range []string{"table", "wide", "json"} {
			out = append(out, goldenCase{c.name + "." + format, append(append([]string{"trace"}, c.args...), "-o", format)})
		}
	}
	// The picture: Graphviz's SVG byte for byte (Graphviz in WebAssembly lays out the same everywhere), and
	// the DOT it is made from, for the traces the README shows and one from a pod.
	for _, name := range []string{"iptables-nodeport", "ebpf-nodeport", "nftables-clusterip-from-pod", "ipvs-nodeport"} {
		for _, c := range traces {
			if c.name == name {
				for _, format := range []string{"svg", "dot"} {
					out = append(out, goldenCase{c.name + "." + format, append(append([]string{"trace"}, c.args...), "-o", format)})
				}
			}
		}
	}
	// --explain: the table, then a sentence per stage in the guide's terms.
	for _, name := range []string{"iptables-nodeport", "iptables-clusterip-from-pod", "nftables-nodeport", "ipvs-nodeport", "ebpf-nodeport", "nftables-etp-local", "nftables-affinity"} {
		for _, c := range traces {
			if c.name == name {
				out = append(out, goldenCase{name + "-explain.table", append(append([]string{"trace"}, c.args...), "--explain")})
			}
		}
	}
	// compare: the same packet through each engine's snapshot, aligned by stage.
	snaps := []string{"--snapshot", app + "iptables-worker2.v1.json", "--snapshot", app + "nftables-worker2.v1.json",
		"--snapshot", app + "ebpf-worker2.v1.json", "--snapshot", ipvs + "vm-snapshot-traced.json"}
	for _, format := range []string{"table", "json", "html"} {
		out = append(out, goldenCase{"compare-nodeport." + format, append(append([]string{"compare"}, snaps...), "--service", "web", "-o", format)})
	}
	out = append(out,
		goldenCase{"compare-clusterip-from-pod.table", append(append([]string{"compare"}, snaps[:6]...), "--service", "web", "--cluster-ip", "--from", "pod/web")},
		goldenCase{"error-compare-unknown-dataplane", []string{"compare", "--dataplanes", "iptables,bogus", "--service", "web"}},
		goldenCase{"error-compare-mixed-sources", []string{"compare", "--snapshot", app + "iptables-worker2.v1.json", "--name", "lab1", "--service", "web"}},
		goldenCase{"error-compare-bad-dst", []string{"compare", "--snapshot", app + "iptables-worker2.v1.json", "--snapshot", app + "nftables-worker2.v1.json", "--dst", "172.18.0.4"}},
		goldenCase{"error-compare-dst-differs", []string{"compare", "--snapshot", app + "iptables-worker2.v1.json", "--snapshot", app + "nftables-worker2.v1.json", "--dst", "172.18.0.4:31758"}},
	)
	return append(out,
		goldenCase{"error-explain-json", []string{"trace", "--snapshot", app + "iptables-worker2.v1.json", "--dst", "172.18.0.4:31758", "--explain", "-o", "json"}},
		goldenCase{"lb-list.table", []string{"lb", "list", "--snapshot", app + "ebpf-worker2.v1.json"}},
		goldenCase{"lb-list.wide", []string{"lb", "list", "--snapshot", app + "ebpf-worker2.v1.json", "-o", "wide"}},
		goldenCase{"lb-list.json", []string{"lb", "list", "--snapshot", app + "ebpf-worker2.v1.json", "-o", "json"}},
		goldenCase{"lb-services.table", []string{"lb", "services", "--snapshot", app + "ebpf-worker2.v1.json"}},
		goldenCase{"lb-services.json", []string{"lb", "services", "--snapshot", app + "ebpf-worker2.v1.json", "-o", "json"}},
		goldenCase{"lb-ct.table", []string{"lb", "ct", "--snapshot", app + "ebpf-worker2.v1.json"}},
		goldenCase{"lb-socknat.table", []string{"lb", "socknat", "--snapshot", app + "ebpf-worker2.v1.json"}},
		goldenCase{"lb-list-not-ebpf", []string{"lb", "list", "--snapshot", app + "iptables-worker2.v1.json"}},
		goldenCase{"error-bad-dst", []string{"trace", "--snapshot", app + "iptables-worker2.v1.json", "--dst", "172.18.0.4"}},
		goldenCase{"error-no-such-pod", []string{"trace", "--snapshot", app + "iptables-worker2.v1.json", "--dst", "10.96.99.110:80", "--from", "pod/nope"}},
		goldenCase{"error-not-a-dump", []string{"trace", "--snapshot", "testdata/README.md", "--dst", "172.18.0.4:31758"}},
		goldenCase{"error-verify-offline", []string{"trace", "--snapshot", app + "iptables-worker2.v1.json", "--dst", "172.18.0.4:31758", "--verify"}},
	)
}

// TestGolden pins what the offline commands print. It was written before the engines were restructured, so that
// a refactor that changes a byte of any table, wide or JSON rendering fails here; a change on purpose rewrites
// the files with -update and says so in its commit.
func TestGolden(t *testing.T) {
	// Pictures are laid out by k8sguide-graphviz, built from this tree, as k8sguide runs it.
	t.Setenv(render.GraphvizEnv, graphviztest.Build(t))
	// The table views fit a classroom projector's 100 columns (the files pin them at that width).
	t.Setenv("COLUMNS", "100")
	for _, c := range goldenCases() {
		t.Run(c.name, func(t *testing.T) { checkGolden(t, c) })
	}
}

// checkGolden runs c and compares what it printed with its file under testdata/golden (-update writes it).
func checkGolden(t *testing.T, c goldenCase) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	status := Run(c.args, strings.NewReader(""), &stdout, &stderr)
	if strings.HasSuffix(c.name, ".table") && (c.args[0] == "trace" || c.args[0] == "compare") || c.name == "lb-list.table" {
		for line := range strings.Lines(stdout.String()) {
			if w := render.TextWidth(strings.TrimSuffix(line, "\n")); w > 100 {
				t.Errorf("a line of %d columns with COLUMNS=100: %q", w, line)
			}
		}
	}
	got := fmt.Sprintf("$ k8sguide %s\n# exit status %d\n# stdout\n%s# stderr\n%s", strings.Join(c.args, " "), status, stdout.String(), stderr.String())
	if strings.HasSuffix(c.name, ".svg") {
		// Kept as a plain SVG, to be looked at: the command must have succeeded quietly.
		if status != 0 || stderr.Len() > 0 {
			t.Fatalf("k8sguide %s: exit status %d: %s", strings.Join(c.args, " "), status, stderr.String())
		}
		got = stdout.String()
	}
	path := filepath.Join("testdata", "golden", c.name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("k8sguide %s printed something else than %s:\n%s", strings.Join(c.args, " "), path, linediff.First(string(want), got))
	}
}
