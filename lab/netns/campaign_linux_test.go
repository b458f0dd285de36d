package netns_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/k8sguide/k8sguide/internal/e2etest"
)

// CampaignEnv turns on TestCampaign (make campaign): some 700 runs of the real binary, minutes long.
const CampaignEnv = "K8SGUIDE_CAMPAIGN"

// TestCampaign tries every flag of every user command with the values a hostile or clumsy user would give
// (empty, negative, huge, a newline, terminal escape sequences, a path that does not exist, a 5,000-character
// word), each in a directory of its own, against a running lab, and counts as a defect every run that: panics or prints a stack; hangs (90 s);
// fails without one "ERROR: " line last, or succeeds with one; lets a control character from its input reach
// the terminal. At the end nothing but the lab may be left in the kernel, and the root namespace's rules,
// routes and forwarding sysctl must be as they were.
func TestCampaign(t *testing.T) {
	if os.Getenv(CampaignEnv) == "" {
		t.Skipf("a campaign of some 700 runs: set %s=1 (make campaign)", CampaignEnv)
	}
	needRoot(t, "iptables-restore")
	name := "cmp"
	upLab(t, name)
	mustK8sguide(t, "deploy", "--name", name)
	mustK8sguide(t, "nodeport", "--name", name, "--check", "0")
	port := nodePortOf(t, name, "web")
	dst := "172.18.0.3:" + port
	root := rootNamespace(t)
	namespacesBefore := netnsList(t)

	// What each command is run with besides the flag under test: enough to reach its work.
	base := map[string][]string{
		"up":              {"up", "--name", "cmpup", "--workers", "0"},
		"get":             {"get", "pods", "--name", name},
		"deploy":          {"deploy", "--name", name},
		"scale":           {"scale", "--name", name, "--replicas", "3"},
		"connect":         {"connect", dst, "--name", name},
		"counters":        {"counters", "--name", name, "--node", name + "-worker", "--service", "web", "--count", "5"},
		"doctor":          {"doctor", "--provider", "netns", "--quick"},
		"nodeport":        {"nodeport", "--name", name, "--check", "2"},
		"node-ip":         {"node-ip", "--name", name},
		"exec":            {"exec", "--name", name, name + "-worker", "--", "true"},
		"snapshot":        {"snapshot", "--name", name, "--node", name + "-worker", "-o", os.DevNull},
		"trace":           {"trace", "--name", name, "--dst", dst},
		"compare":         {"compare", "--name", name, "--dst", dst},
		"lb list":         {"lb", "list", "--name", name},
		"scenario show":   {"scenario", "show", "web"},
		"scenario list":   {"scenario", "list"},
		"scenario schema": {"scenario", "schema"},
	}
	hostile := map[string][]string{
		// No value names a real path out of the case's own directory: a command that writes where it is told
		// (snapshot -o) would write there (one run of this campaign overwrote /etc/passwd with a snapshot).
		"string": {"", "nosuch", "a\nb", "\x1b]0;pwned\x07\x1b[31mred", strings.Repeat("a", 5000), "/nonexistent/dir/file", "-1"},
		"int":    {"-1", "0", "99999999999999", "x", "1e9"},
		"bool":   {"maybe"},
		"slice":  {",", "a,,b", "\x1b[2J"},
	}
	cmds := map[string][]campaignFlag{}
	for key := range base {
		out, err := exec.Command(e2etest.Binary, append(strings.Fields(key), "--help")...).Output()
		if err != nil {
			t.Fatalf("%s --help: %v", key, err)
		}
		cmds[key] = helpFlags(string(out))
	}
	cases, defects := 0, 0
	defect := func(args []string, format string, a ...any) {
		defects++
		t.Errorf("k8sguide %q: %s", args, fmt.Sprintf(format, a...))
	}
	for _, key := range slices.Sorted(func(yield func(string) bool) {
		for k := range base {
			if !yield(k) {
				return
			}
		}
	}) {
		for _, f := range cmds[key] {
			if f.name == "help" || f.name == "kubeconfig" && key == "up" {
				continue // help prints help; up's --kubeconfig writes files, tried in TestMergeKubeconfig*
			}
			for _, v := range hostile[f.kind] {
				args := append(slices.Clone(base[key]), "--"+f.name+"="+v)
				cases++
				stdout, stderr, code, took := runCampaign(t.TempDir(), args)
				if d := campaignDefect(args, stdout, stderr, code, took); d != "" {
					defect(args, "%s", d)
				}
				if key == "up" {
					// Whatever lab the case made (a --name it was given, too) goes before the next case.
					e2etest.K8sguide(t, "down", "--name", "cmpup")
					if f.name == "name" && !strings.ContainsAny(v, "\n\x1b") && v != "" {
						e2etest.K8sguide(t, "down", "--name", v)
					}
				}
			}
		}
	}
	if after := rootNamespace(t); after != root {
		defects++
		t.Errorf("the root namespace's rules, routes or forwarding changed during the campaign")
	}
	for _, ns := range netnsList(t) {
		if !slices.Contains(namespacesBefore, ns) && !strings.HasPrefix(ns, name+"-pod-") {
			defects++
			t.Errorf("namespace %s is left behind", ns)
		}
	}
	t.Logf("campaign: %d cases, %d defects", cases, defects)
}

const campaignLimit = 90 * time.Second

// campaignDefect says what is wrong with one run of the campaigns ("" when nothing is): a hang, a panic or
// stack, a failure not on one ERROR line last, an exit 0 with an error, a control character on the terminal,
// an error of several lines shown with \n escapes where the case typed no newline.
func campaignDefect(args []string, stdout, stderr string, code int, took time.Duration) string {
	out := stdout + stderr
	switch {
	case took >= campaignLimit:
		return fmt.Sprintf("still running after %s", campaignLimit)
	case strings.Contains(out, "panic:") || strings.Contains(out, "goroutine ") || strings.Contains(out, "ERROR: internal error"):
		return "a panic or stack:\n" + out
	case code != 0 && !lastLineIsError(stderr):
		return fmt.Sprintf("exit %d without one ERROR line last:\n%s", code, stderr)
	case code == 0 && strings.Contains(stderr, "ERROR"):
		return "exit 0 with an error:\n" + stderr
	case strings.ContainsAny(out, "\x1b\x07\r"):
		return fmt.Sprintf("a control character reached the terminal: %q", out)
	case code != 0 && strings.Contains(stderr, `\n`) && !slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, "\n") }):
		return "an error of several lines shown as one with \\n escapes: " + stderr
	}
	return ""
}

// campaignFlag is a flag as a command's help lists it, and the kind of value it takes.
type campaignFlag struct{ name, kind string }

// helpFlags reads a command's flags from its help ("  -o, --output string   ..."; a flag without a type word
// is a bool).
func helpFlags(help string) []campaignFlag {
	var flags []campaignFlag
	for _, l := range strings.Split(help, "\n") {
		f := strings.Fields(l)
		if len(f) > 1 && strings.HasPrefix(f[0], "-") && len(f[0]) == 3 { // "-o, --output"
			f = f[1:]
		}
		if len(f) == 0 || !strings.HasPrefix(f[0], "--") || strings.Contains(l, "Global Flags") {
			continue
		}
		name, kind := strings.TrimPrefix(f[0], "--"), "bool"
		if len(f) > 1 {
			switch f[1] {
			case "string":
				kind = "string"
			case "int", "int32", "int64", "uint", "duration", "float", "float64":
				kind = "int"
			case "strings", "ints", "stringArray":
				kind = "slice"
			default:
				if strings.ToUpper(f[1]) == f[1] && strings.ToLower(f[1]) != f[1] {
					kind = "string" // a named value: "--snapshot FILE"
				}
			}
		}
		if name == "version" {
			continue // the global --version
		}
		flags = append(flags, campaignFlag{name, kind})
	}
	return flags
}

// runCampaign runs one case in dir, where whatever files it makes under relative names land.
func runCampaign(dir string, args []string) (stdout, stderr string, code int, took time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), campaignLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, e2etest.Binary, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "COLUMNS=100")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Stdin = &o, &e, strings.NewReader("")
	start := time.Now()
	err := cmd.Run()
	code = cmd.ProcessState.ExitCode()
	if err != nil && code == 0 {
		code = -1
	}
	return o.String(), e.String(), code, time.Since(start)
}

// netnsList names the network namespaces there are.
func netnsList(t *testing.T) []string {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names
}

// lastLineIsError: a failed command's last line of stderr is its one ERROR line, and no other line is one.
func lastLineIsError(stderr string) bool {
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	if !strings.HasPrefix(lines[len(lines)-1], "ERROR: ") {
		return false
	}
	for _, l := range lines[:len(lines)-1] {
		if strings.HasPrefix(l, "ERROR") {
			return false
		}
	}
	return true
}

// rootNamespace digests what the tool must never change in the root namespace: its iptables and nftables
// rules, its routes and its forwarding sysctl.
func rootNamespace(t *testing.T) string {
	h := sha256.New()
	for _, argv := range [][]string{{"iptables-save"}, {"nft", "list", "ruleset"}, {"ip", "route", "show", "table", "all"}, {"sysctl", "net.ipv4.ip_forward"}} {
		out, _ := exec.Command(argv[0], argv[1:]...).Output()
		// iptables-save's comments carry the time it ran.
		for _, l := range strings.Split(string(out), "\n") {
			if !strings.HasPrefix(l, "#") {
				h.Write([]byte(l + "\n"))
			}
		}
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}
