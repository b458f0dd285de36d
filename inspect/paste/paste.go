// Package paste is the front end of `trace --snapshot` for what people paste: a tool's output as it came off a
// terminal, an issue or a log. It removes what surrounds the dumps (a byte-order mark, markdown fences, shell
// prompts and command lines, kube-proxy's and journald's log prefixes) and splits a paste that holds several
// commands' outputs into one Output each, so that each is read by its own reader. It knows the shapes of the
// tools' outputs only well enough to tell where one ends; reading them is the engines' job.
package paste

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Output is one command's output in a paste.
type Output struct {
	// Command is the command line that printed it, as pasted, without the prompt ("" when the paste does not
	// show it). Wrappers that run it elsewhere (sudo, kubectl exec … --, docker exec NODE, ip netns exec NS)
	// are kept: the reader looks for the tool's own words.
	Command string
	// Text is the output's lines.
	Text string
	// Line is where the output starts in the paste (1-based), for messages.
	Line int
	// Ended says the paste shows where the output ends: another command or tool's output follows it, or its
	// markdown fence closes. An output without it may have been cut after its last line.
	Ended bool
}

// WithCommand is the output with its command line first ("$ COMMAND") and, when it Ended, the next prompt ("$ ")
// last: the form engines' readers take (see dataplanes.Engine.Sniff).
func (o Output) WithCommand() string {
	head, tail := "", ""
	if o.Command != "" {
		head = "$ " + o.Command + "\n"
	}
	if o.Ended {
		tail = "\n" + EndLine
	}
	// One concatenation, one copy of the text (an 8 MB dump was copied twice when it had both).
	return head + o.Text + tail
}

// EndLine is the line after an output the paste shows whole: an empty prompt.
const EndLine = "$ "

// fenceEnd stands, between unfence and the splitter, where a markdown fence closed (a line of one NUL, which
// text does not hold).
const fenceEnd = "\x00"

// Paste is a paste cleaned and split.
type Paste struct {
	Outputs []Output
	// Stripped says what was removed around the dumps ("a UTF-8 byte-order mark", "markdown fences", …).
	Stripped []string
	// Skipped names outputs of commands that print no dump k8sguide reads (`kubectl get svc`), left out.
	Skipped []string
}

// Clean removes what surrounds the dumps in data and splits it into outputs.
func Clean(data string) Paste {
	var p Paste
	strip := func(what string) {
		for _, s := range p.Stripped {
			if s == what {
				return
			}
		}
		p.Stripped = append(p.Stripped, what)
	}
	if t, ok := strings.CutPrefix(data, "\ufeff"); ok {
		data = t
		strip("a UTF-8 byte-order mark")
	}
	crlf := strings.Contains(data, "\r\n")
	if crlf {
		data = strings.ReplaceAll(data, "\r\n", "\n")
	}
	lines := strings.Split(data, "\n")
	// at holds where each line starts in data, -1 for a line that is not data's own (made by the cleaning): an
	// output whose lines follow one another in data, as they were, is a slice of it, not a copy (a 5,000-Service
	// dump is 8 MB, and its rules keep slices of it), whatever was stripped around it (fences, prompts).
	at := make([]int, len(lines))
	for i, next := 0, 0; i < len(lines); i++ {
		at[i], next = next, next+len(lines[i])+1
	}
	lines, at, fenced := unfence(lines, at)
	if fenced {
		strip("markdown fences (and the text outside them)")
	}
	var n int
	if lines, at, n = unprefix(lines, at, strip); n > 0 {
		strip(fmt.Sprintf("log prefixes on %d lines (and kube-proxy's log messages)", n))
	}
	if strings.Contains(data, "Restoring iptables") { // both of kube-proxy's log forms say it: one scan, not two a line
		lines, at = unquoteLogged(lines, at, strip)
	}

	cur := Output{Line: 1}
	var text []string
	sliced := false    // whether text's lines follow one another in data, from start to end
	start, end := 0, 0 // where text's lines start and end in data, when sliced
	hasText := false   // whether text holds a line that is not blank
	flush := func() {
		var body string
		if sliced {
			body = data[start:end]
		} else {
			body = strings.Join(text, "\n")
		}
		if !hasText {
			body = "" // blank and comment lines only: no output (a note before a command line)
		}
		if body != "" || cur.Command != "" {
			cur.Text = body
			if cur.Command != "" && !dumpTool(cur.Command) && !looksLikeDump(body) {
				p.Skipped = append(p.Skipped, cur.Command)
			} else if body != "" {
				if !dumpTool(cur.Command) {
					// `# cat rules.txt` (a root prompt, or a note) before a dump: what follows is a dump
					// whatever printed it, and the command names no tool its reader could use.
					cur.Command = ""
				}
				p.Outputs = append(p.Outputs, cur)
			}
		}
		text, hasText = nil, false
	}
	format := ""
	for i, l := range lines {
		if l == fenceEnd {
			// A fence closed: what was read is whole, unless more of the same output follows in another.
			cur.Ended = hasText
			continue
		}
		if cmd, ok := commandLine(l); ok {
			cur.Ended = hasText || cur.Command != ""
			flush()
			// A copy: a slice of the paste would keep all of it (8 MB) for the sake of one line.
			cur = Output{Command: strings.Clone(cmd), Line: i + 2}
			format = ""
			if strings.Contains(l, "$") || strings.Contains(l, "#") || strings.Contains(l, ">") {
				strip("shell prompts and command lines")
			} else {
				strip("command lines")
			}
			continue
		}
		// Outputs pasted one after another without their commands: a line only one tool prints at the start
		// of its output begins another.
		if f := startOf(l); f != "" {
			if f != format && hasText {
				cur.Ended = true
				flush()
				cur = Output{Line: i + 1}
			}
			format = f
		}
		if len(text) == 0 && strings.TrimSpace(l) == "" {
			cur.Line = i + 2
			continue
		}
		if len(text) == 0 {
			sliced, start = at[i] >= 0, at[i]
		} else {
			sliced = sliced && at[i] == end+1
		}
		end = at[i] + len(l)
		text = append(text, l)
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
			// A comment line alone is no output: `# Warning: table ip nat is managed by iptables-nft, do not
			// touch!` (nft's, before each such table) or a note on top belongs to the dump after it.
			hasText, cur.Ended = true, false
		}
	}
	flush()
	if len(p.Outputs) == 1 && len(p.Stripped) == 0 && !strings.HasSuffix(strings.TrimRight(data, "\n"), "\\") {
		// One tool's output and nothing around it: a file the command wrote (`ipvsadm -Ln > FILE`), whole.
		p.Outputs[0].Ended = true
	}
	return p
}

// unfence keeps what is inside markdown fences (``` or ~~~ lines) when the paste has any: text outside them is
// the prose. An unclosed fence runs to the end.
func unfence(lines []string, at []int) ([]string, []int, bool) {
	isFence := func(l string) bool {
		t := strings.TrimSpace(l)
		t = strings.TrimLeft(t, "`")
		return (strings.HasPrefix(strings.TrimSpace(l), "```") || strings.HasPrefix(strings.TrimSpace(l), "~~~")) && !strings.ContainsAny(t, " \t")
	}
	has := false
	for _, l := range lines {
		if isFence(l) {
			has = true
			break
		}
	}
	if !has {
		// A single stray backtick opening a pasted block (`[user@host ~]$ …) is part of the same habit.
		if len(lines) > 0 && strings.HasPrefix(lines[0], "`") && !strings.HasPrefix(lines[0], "``") {
			lines[0] = lines[0][1:]
			at[0]++
			return lines, at, true
		}
		return lines, at, false
	}
	out, outAt := make([]string, 0, len(lines)), make([]int, 0, len(lines)) // at most all of them
	in := false
	for i, l := range lines {
		if isFence(l) {
			in = !in
			if !in {
				out, outAt = append(out, fenceEnd, ""), append(outAt, -1, -1) // the block ended; keep blocks apart
			}
			continue
		}
		if in {
			out, outAt = append(out, l), append(outAt, at[i])
		}
	}
	return out, outAt, true
}

// Log prefixes: klog's (`I0510 12:00:00.000000       1 proxier.go:1234] `) and journald's (`Nov 14 11:06:11
// HOSTNAME kube-proxy[12085]: `), which kube-proxy's logs carry on every line they print.
var (
	klogPrefix     = regexp.MustCompile(`^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ [\w.-]+:\d+\] ?`)
	journaldPrefix = regexp.MustCompile(`^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ [\w.-]+(\[\d+\])?: ?`)
	// kubectl logs --timestamps, and container runtimes' log files.
	timestampPrefix = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d) (stdout|stderr)? ?[FP]? ?`)
)

// unprefix removes log prefixes in place and returns how many lines had one. A line klog printed is a log
// message, not a dump's line, unless it carries the restore input (see unquoteLogged): it is dropped, and a
// failed restore is said.
func unprefix(lines []string, at []int, strip func(string)) ([]string, []int, int) {
	n := 0
	out, outAt := lines[:0], at[:0] // in place: a line is written where it was read, or before
	for i, l := range lines {
		orig := l
		// The prefixes' first bytes, checked before their expressions: a 100,000-line dump has none.
		if len(l) > 4 && isDigit(l[0]) && l[4] == '-' {
			if m := timestampPrefix.FindString(l); m != "" {
				l = l[len(m):]
			}
		}
		if len(l) > 3 && 'A' <= l[0] && l[0] <= 'Z' && 'a' <= l[1] && l[1] <= 'z' && l[3] == ' ' {
			if m := journaldPrefix.FindString(l); m != "" {
				l = l[len(m):]
			}
		}
		if len(l) < 2 || !strings.ContainsRune("IWEF", rune(l[0])) || !isDigit(l[1]) {
			if l != orig {
				n++
			}
			out, outAt = append(out, l), append(outAt, shifted(at[i], len(orig)-len(l)))
			continue
		}
		if m := klogPrefix.FindString(l); m != "" {
			l = l[len(m):]
			if !strings.Contains(l, "Restoring iptables") {
				if strings.Contains(l, "Failed to execute iptables-restore") {
					strip("kube-proxy's log says its iptables-restore failed: these rules may never have been loaded")
				}
				n++
				continue
			}
		}
		if l != orig {
			n++
		}
		out, outAt = append(out, l), append(outAt, shifted(at[i], len(orig)-len(l)))
	}
	return out, outAt, n
}

// shifted is where a line starts in the paste once by bytes were cut from its front (-1 stays -1).
func shifted(at, by int) int {
	if at < 0 {
		return -1
	}
	return at + by
}

// unquoteLogged turns kube-proxy's logged restore input back into lines: `Restoring iptables rules: *filter`
// (before 1.21 the rules follow on their own lines) and the structured `"Restoring iptables" rules="*filter\n…"`
// (one line, quoted). Log messages between them are dropped when the paste is a log.
func unquoteLogged(lines []string, at []int, strip func(string)) ([]string, []int) {
	var out []string
	var outAt []int
	logged := false
	for n, l := range lines {
		var with []string // what l stands for, when it carries logged rules
		if i := strings.Index(l, "Restoring iptables rules: "); i >= 0 {
			with = []string{l[i+len("Restoring iptables rules: "):]}
		} else if i := strings.Index(l, ` rules="`); i >= 0 && strings.Contains(l, "Restoring iptables") {
			if s, err := strconv.Unquote(strings.TrimSpace(l[i+len(" rules="):])); err == nil {
				with = strings.Split(s, "\n")
			}
		}
		switch {
		case with != nil && !logged:
			// The first logged line: from here on the lines are new (a dump with none keeps its own, uncopied).
			logged = true
			out = append(append(make([]string, 0, len(lines)), lines[:n]...), with...)
			outAt = append(append(make([]int, 0, len(lines)), at[:n]...), make([]int, len(with))...)
			for i := n; i < len(outAt); i++ {
				outAt[i] = -1 // unquoted: no slice of the paste
			}
		case with != nil:
			out = append(out, with...)
			for range with {
				outAt = append(outAt, -1)
			}
		case logged:
			out, outAt = append(out, l), append(outAt, at[n])
		}
	}
	if !logged {
		return lines, at
	}
	strip("kube-proxy's log of its restore input")
	return out, outAt
}

// startOf says which tool's output a line begins ("" for a line any output may hold).
func startOf(l string) string {
	t := strings.TrimSpace(l)
	switch {
	case strings.HasPrefix(t, "IP Virtual Server version"):
		return "ipvsadm"
	case strings.HasPrefix(t, "Name: ") && !strings.Contains(t, "  "):
		return "ipset"
	case strings.HasPrefix(t, "# Generated by iptables"), strings.HasPrefix(t, "# Generated by ip6tables"):
		return "iptables-save"
	case t == "*nat" || t == "*filter" || t == "*mangle" || t == "*raw" || t == "*security":
		return "iptables-save"
	case strings.HasPrefix(t, "Chain ") && strings.Contains(t, "("):
		return "iptables -L"
	case strings.HasPrefix(t, "table ") && strings.HasSuffix(t, "{"):
		return "nft"
	}
	return ""
}

// looksLikeDump says whether an output's first line (past blank and comment lines) is one a dump starts with or
// is made of: what a `cat FILE` (or anything else) printed is read when it is a dump.
func looksLikeDump(body string) bool {
	for _, l := range strings.Split(body, "\n") {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "#") && startOf(t) == "" {
			continue
		}
		return startOf(t) != "" || notCommand(t) || strings.HasPrefix(t, "chain ") && strings.HasSuffix(t, "{") ||
			strings.HasPrefix(t, "add table ") || strings.HasPrefix(t, "Prot LocalAddress")
	}
	return false
}

// Prompts: `user@host:~$ `, `root@node:~# `, `[root@vm01 ~]# `, `controlplane $ `, `sh-4.2# `, `$ `, `# `.
var prompt = regexp.MustCompile(`^\s*(?:\[[^\]]*\]|[\w.-]+@[\w.-]+(?::\S*)?|[\w.-]+-[\d.]+|[\w.-]+ ?(?::\S*)?)?\s?[$#%]\s+`)

// commandLine says whether l is a shell command line (a prompt and a command, or a bare command naming a dump
// tool) and returns the command.
func commandLine(l string) (string, bool) {
	t := strings.TrimSpace(l)
	if t == "" {
		return "", false
	}
	if notCommand(t) {
		return "", false
	}
	rest := t
	bare := true
	if m := prompt.FindString(l); m != "" {
		rest = strings.TrimSpace(l[len(m):])
		bare = false
	}
	if rest == "" {
		return "", false
	}
	// A trailing shell comment (`ipvsadm -Ln   # list the rules`) is not the command's.
	if i := strings.Index(rest, " #"); i > 0 {
		rest = strings.TrimSpace(rest[:i])
	}
	words, tool := commandTool(rest)
	if len(words) == 0 {
		return "", false
	}
	if tool != "" {
		return rest, true
	}
	// Without a dump tool, only a prompt with a command a shell runs is a command line: `# Generated by
	// iptables-save` and `# Completed on …` are iptables-save's comments, `$` starts no rule.
	if bare || !commonCommand(words[0]) {
		return "", false
	}
	return rest, true
}

// notCommand says, without the prompt expression, that a line is a dump's own: an iptables-save rule, chain
// or table line. A 100,000-line dump is mostly these.
func notCommand(t string) bool {
	switch {
	case len(t) > 3 && t[0] == '-' && t[2] == ' ' && strings.ContainsRune("ANIPXF", rune(t[1])):
		return true // -A CHAIN …, -N, -I, -P, -X, -F
	case t[0] == ':' || t[0] == '*' || t == "COMMIT":
		return true
	case len(t) > 1 && t[0] == '[' && isDigit(t[1]):
		return true // [packets:bytes] counters of iptables-save -c
	}
	return false
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

// The tools whose output k8sguide reads, and the short aliases of them the guide uses.
var dumpTools = map[string]bool{
	"iptables": true, "iptables-save": true, "iptables-legacy": true, "iptables-legacy-save": true,
	"iptables-nft": true, "iptables-nft-save": true, "ip6tables": true, "ip6tables-save": true,
	"ip6tables-legacy-save": true, "ip6tables-nft-save": true, "nft": true, "ipvsadm": true, "ipset": true,
	"ipt": true, "ips": true, "ipv": true,
}

// dumpTool says whether a command runs a tool whose output k8sguide reads.
func dumpTool(cmd string) bool {
	_, tool := commandTool(cmd)
	return tool != ""
}

// commandTool splits a command into words (up to a `|`) and finds the dump tool it runs: its first word, or
// past a wrapper that runs it elsewhere (sudo, kubectl exec … --, docker exec NODE, ip netns exec NS, nsenter …,
// chroot DIR).
func commandTool(cmd string) (words []string, tool string) {
	cmd, _, _ = strings.Cut(cmd, "|")
	words = strings.Fields(cmd)
	if len(words) == 0 {
		return nil, ""
	}
	base := func(w string) string { return w[strings.LastIndexByte(w, '/')+1:] }
	if dumpTools[base(words[0])] {
		return words, base(words[0])
	}
	if !wrappers[base(words[0])] {
		return words, ""
	}
	for _, w := range words[1:] {
		if dumpTools[base(w)] {
			return words, base(w)
		}
	}
	return words, ""
}

// wrappers run the command after them, maybe elsewhere.
var wrappers = map[string]bool{
	"sudo": true, "kubectl": true, "k": true, "docker": true, "podman": true, "crictl": true, "ctr": true,
	"nsenter": true, "ip": true, "chroot": true, "env": true, "time": true, "watch": true, "sh": true, "bash": true,
	"oc": true, "nerdctl": true, "k3s": true, "microk8s": true, "minikube": true,
}

// commonCommand says whether a word is a command people run beside the dumps (and paste with them).
func commonCommand(w string) bool {
	switch w {
	case "kubectl", "k", "sudo", "which", "yum", "apt", "apt-get", "dnf", "ls", "cat", "docker", "crictl", "ip",
		"ss", "netstat", "curl", "wget", "echo", "grep", "systemctl", "journalctl", "uname", "k3s", "microk8s",
		"minikube", "kind", "conntrack", "tcpdump", "modprobe", "lsmod", "sysctl", "ping", "dig", "nslookup",
		"export", "cd", "watch", "telnet", "nc", "lsb_release", "hostname", "ifconfig", "route", "arp",
		"iptables-restore", "nsenter", "ctr", "helm", "kubeadm", "cilium", "calicoctl", "sh", "bash", "su":
		return true
	}
	return false
}
