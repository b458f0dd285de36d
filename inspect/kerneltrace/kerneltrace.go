// Package kerneltrace asks the kernel which rules a real packet hit. Inside a node it adds a private
// nftables table that sets nftrace on exactly one flow (both iptables-nft and kube-proxy's nftables rules
// are nf_tables rules, so one mechanism serves both engines), reads the kernel's trace events with
// `xtables-monitor --trace` (iptables text) or `nft monitor trace` (nft text), and removes the table again,
// also on error, timeout and interrupt.
package kerneltrace

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/k8sguide/k8sguide/dataplanes/netfilter"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// TablePrefix starts the name of every tracing table; the tracer's own rules never appear in a prediction.
const TablePrefix = netfilter.TraceTablePrefix

// TableName is the tracing table for a flow (its Src invalid: any source, as for packets the node makes itself); unique per source port so concurrent traces do not collide.
func TableName(f trace.Flow) string { return fmt.Sprintf("%s-%d", TablePrefix, f.Sport) }

// Ruleset is the nft script that creates the tracing table: trace the flow where packets enter
// (prerouting) and where the node makes them (output), before conntrack and everything else; and a
// marker rule the session uses to know the monitor is listening. A marker is traced in the table's own chains
// only: it would otherwise report every chain of the node's output path, and a slow monitor (an emulated CPU)
// fed markers faster than it prints them overflows its socket (ENOBUFS) and exits.
func Ruleset(f trace.Flow) string {
	match := fmt.Sprintf("ip daddr %s %s sport %d %s dport %d", f.Dst, f.Proto, f.Sport, f.Proto, f.Dport)
	if f.Src.IsValid() {
		match = fmt.Sprintf("ip saddr %s ", f.Src) + match
	}
	return fmt.Sprintf(`table ip %[1]s {
	chain pre { type filter hook prerouting priority raw - 5; %[2]s meta nftrace set 1; }
	chain out { type filter hook output priority raw - 5; %[4]s meta nftrace set 0; %[2]s meta nftrace set 1; }
	chain ready { type filter hook output priority raw - 6; %[4]s meta nftrace set 1; }
}
`, TableName(f), match, markerPort, markerMatch)
}

// ownedCommands is Ruleset as `nft -i` commands, one a line (interactive nft reads a line at a time), with the
// table flagged owner: the kernel deletes it when the netlink socket that made it closes, that is when the
// `nft -i` holding it exits, however the process that started it died (a SIGKILLed --verify left its table,
// and every later verify on the node disagreed until it was deleted by hand). No one else may change it.
func ownedCommands(f trace.Flow) string {
	match := fmt.Sprintf("ip daddr %s %s sport %d %s dport %d", f.Dst, f.Proto, f.Sport, f.Proto, f.Dport)
	if f.Src.IsValid() {
		match = fmt.Sprintf("ip saddr %s ", f.Src) + match
	}
	t := "ip " + TableName(f)
	return fmt.Sprintf(`add table %[1]s { flags owner; }
add chain %[1]s pre { type filter hook prerouting priority raw - 5; }
add rule %[1]s pre %[2]s meta nftrace set 1
add chain %[1]s out { type filter hook output priority raw - 5; }
add rule %[1]s out %[3]s meta nftrace set 0
add rule %[1]s out %[2]s meta nftrace set 1
add chain %[1]s ready { type filter hook output priority raw - 6; }
add rule %[1]s ready %[3]s meta nftrace set 1
list table %[1]s
`, t, match, markerMatch)
}

// markerPort is where marker packets go (127.0.0.9, the discard port).
const (
	markerPort  = 9
	markerMatch = "ip daddr 127.0.0.9 udp dport 9"
)

// Session is a running trace inside a node.
type Session struct {
	flow    trace.Flow
	owner   *tableOwner // nil: the table is not owned (a kernel or nft without owner tables)
	engine  string
	monitor *exec.Cmd
	mu      sync.Mutex
	lines   []string
	ready   chan struct{}
	once    sync.Once
	done    chan struct{}
	markers chan string // marker event lines, for Stop
	stderr  tailBuffer  // the monitor's complaints, for saying why a trace is incomplete
}

// Incomplete starts the error of a trace whose events cannot all have been seen: the monitor exited early or
// never reported the stop marker. Callers may match it in the message of a process that ran the trace.
const Incomplete = "the kernel trace is incomplete"

// tailBuffer keeps the last bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > 4096 {
		b.buf = b.buf[len(b.buf)-4096:]
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

func (b *tailBuffer) lastLine() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(b.buf)), "\n")
	return lines[len(lines)-1]
}

// Start creates the tracing table and starts the monitor (engine "iptables" uses xtables-monitor, anything
// else nft monitor). It returns once the monitor is seen receiving events. Call Stop in every case.
func Start(ctx context.Context, engine string, f trace.Flow) (*Session, error) {
	s := &Session{flow: f, engine: engine, ready: make(chan struct{}), done: make(chan struct{}), markers: make(chan string, 64)}
	RemoveOrphans(context.WithoutCancel(ctx))
	owner, err := startOwner(ctx, f)
	switch {
	case err == nil:
		s.owner = owner
	case ctx.Err() != nil:
		return nil, ctx.Err()
	default:
		// An older kernel (before 5.12) or nft (errNoOwnerTables), or an nft built without its interactive
		// mode: the table as before, removed on every way out but a SIGKILL, and then by the next trace's
		// RemoveOrphans. A ruleset the kernel refuses fails here too, and says why.
		if err := nft(context.WithoutCancel(ctx), Ruleset(f), "-f", "-"); err != nil {
			return nil, fmt.Errorf("adding the tracing table: %w", err)
		}
	}
	// Line-buffered: writing to a pipe, the monitors would otherwise hold events in a stdio buffer, and
	// a packet with few events (a drop) would still be in it when the monitor is stopped.
	argv := []string{"stdbuf", "-oL", "nft", "monitor", "trace"}
	if engine == "iptables" {
		argv = []string{"stdbuf", "-oL", "xtables-monitor", "--trace"}
	}
	s.monitor = exec.Command(argv[0], argv[1:]...)
	dieWithParent(s.monitor)
	out, err := s.monitor.StdoutPipe()
	if err != nil {
		s.removeTable()
		return nil, err
	}
	s.monitor.Stderr = &s.stderr
	if err := s.monitor.Start(); err != nil {
		s.removeTable()
		return nil, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			l := sc.Text()
			// Marker packets (to 127.0.0.9) show the monitor is listening; they are not part of the flow.
			if strings.Contains(l, "ip daddr 127.0.0.9 ") || strings.Contains(l, "DST=127.0.0.9 ") {
				s.once.Do(func() { close(s.ready) })
				select {
				case s.markers <- l:
				default:
				}
				continue
			}
			s.mu.Lock()
			s.lines = append(s.lines, l)
			s.mu.Unlock()
		}
	}()
	// Send marker packets until the monitor reports one: from then on it sees every event.
	deadline := time.Now().Add(10 * time.Second)
	for {
		sendMarker(markerPort)
		select {
		case <-s.ready:
			return s, nil
		case <-ctx.Done():
			s.Stop()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("%s reported no events within 10s", argv[0])
		}
	}
}

// sendMarker sends one marker packet and returns its source port (0 if it could not).
func sendMarker(port int) int {
	c, err := netDialUDP(port)
	if err != nil {
		return 0
	}
	defer c.Close()
	c.Write([]byte("k8sguide"))
	if a, ok := c.LocalAddr().(*net.UDPAddr); ok {
		return a.Port
	}
	return 0
}

// Stop waits until the monitor has printed everything that happened before it was called, stops the
// monitor, removes the table and returns the event lines. The kernel queues trace events in order, so once
// the monitor shows a marker packet sent now, the flow's earlier events are in too (under load a monitor
// can lag well behind the packets it reports). When that marker never comes back (the monitor exited, or
// lagged beyond the limit) the lines may lack some of the flow's events, and the error (starting with
// Incomplete) says so. nft's events of rules newer than the monitor are given their rule text (see
// ResolveUnknownRules).
func (s *Session) Stop() ([]string, error) {
	var err error
	if s.monitor != nil && s.monitor.Process != nil {
		// Generous: on a loaded 2-core machine a monitor has been seen lagging by seconds.
		err = s.awaitMarker(20 * time.Second)
	}
	if s.monitor != nil && s.monitor.Process != nil {
		s.monitor.Process.Kill()
		s.monitor.Wait()
		<-s.done
	}
	s.removeTable()
	s.mu.Lock()
	lines := append([]string(nil), s.lines...)
	s.mu.Unlock()
	if s.engine != "iptables" {
		var rerr error
		lines, rerr = ResolveUnknownRules(lines, s.flow, listChain)
		if err == nil {
			err = rerr
		}
	}
	return lines, err
}

// unknownRule is how `nft monitor trace` prints the event of a rule it does not know. The monitor reads the
// ruleset once, when it starts, and never again; a chain rewritten after that (kube-proxy's nftables mode
// flushes and refills a Service's chains whenever its endpoints change, for instance when a pod it scaled
// away is finally gone) has rules with new handles, and the monitor prints their events as
// "trace id 1a2b3c4d ip kube-proxy service-… unknown rule handle 6 (verdict continue)".
var unknownRule = regexp.MustCompile(`^(trace id [0-9a-f]+ (\S+) (\S+) (\S+) )unknown rule handle (\d+)(.*)$`)

// ResolveUnknownRules gives the flow's unknown-rule events (see unknownRule) the text of their rule, read
// again from the kernel with list (`nft -a list chain`), so they read as the monitor prints a rule it knows.
// The kernel never hands a handle out twice in a table, so the rule listed under it now is the rule the
// packet met, unless it was replaced in place since (`nft replace rule` keeps the handle; kube-proxy never
// replaces, it flushes and adds). A rule deleted again since cannot be named: the error
// (starting with Incomplete) says so, and the line stays as the monitor printed it.
func ResolveUnknownRules(lines []string, f trace.Flow, list func(family, table, chain string) (string, error)) ([]string, error) {
	ours := ownIDs(lines, nftID, nftPacketOf(f))
	rules := map[string]map[string]string{} // "family table chain" -> handle -> rule text
	var missing []string
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = l
		m := unknownRule.FindStringSubmatch(l)
		if m == nil || !ours[nftID.FindStringSubmatch(l)[1]] {
			continue
		}
		chain := m[2] + " " + m[3] + " " + m[4]
		if _, ok := rules[chain]; !ok {
			listing, err := list(m[2], m[3], m[4])
			if err != nil {
				missing = append(missing, fmt.Sprintf("chain %s could not be listed: %v", chain, err))
			}
			rules[chain] = handles(listing)
		}
		text, ok := rules[chain][m[5]]
		if !ok {
			missing = append(missing, fmt.Sprintf("rule handle %s of chain %s was deleted before it could be read", m[5], chain))
			continue
		}
		out[i] = m[1] + "rule " + text + m[6]
	}
	if len(missing) > 0 {
		return out, fmt.Errorf("%s: the ruleset changed during the trace: %s", Incomplete, strings.Join(slices.Compact(missing), "; "))
	}
	return out, nil
}

// handles maps each rule of an `nft -a list chain` listing to its handle.
func handles(listing string) map[string]string {
	out := map[string]string{}
	for _, l := range strings.Split(listing, "\n") {
		i := strings.LastIndex(l, " # handle ")
		if i < 0 || strings.HasSuffix(strings.TrimSpace(l[:i]), "{") {
			continue // not a rule: the table's or the chain's own line
		}
		out[strings.TrimSpace(l[i+len(" # handle "):])] = strings.TrimSpace(l[:i])
	}
	return out
}

// listChain lists one chain with its rule handles.
func listChain(family, table, chain string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return nftOutput(ctx, "", "-a", "list", "chain", family, table, chain)
}

// awaitMarker sends a marker packet and waits (up to limit) for the monitor to report that very packet.
func (s *Session) awaitMarker(limit time.Duration) error {
	deadline := time.After(limit)
	for {
		port := sendMarker(markerPort)
		if port == 0 {
			return fmt.Errorf("%s: the stop marker could not be sent", Incomplete)
		}
		ours := []string{fmt.Sprintf(" SPORT=%d ", port), fmt.Sprintf(" udp sport %d ", port)}
		retry := time.After(time.Second)
		for {
			select {
			case l := <-s.markers:
				if strings.Contains(l, ours[0]) || strings.Contains(l, ours[1]) {
					return nil
				}
				continue
			case <-s.done:
				msg := fmt.Sprintf("%s: the monitor exited before the stop marker", Incomplete)
				if said := s.stderr.lastLine(); said != "" {
					msg += ": " + said
				}
				return errors.New(msg)
			case <-deadline:
				return fmt.Errorf("%s: the monitor did not report the stop marker within %v", Incomplete, limit)
			case <-retry:
			}
			break
		}
	}
}

func (s *Session) removeTable() {
	if s.owner != nil {
		s.owner.close()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	RemoveTable(ctx, s.flow)
}

// tableOwner is the `nft -i` whose netlink socket owns a flow's tracing table.
type tableOwner struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr tailBuffer
	exited chan struct{}
	once   sync.Once
}

// errNoOwnerTables says the kernel or nft here cannot flag a table owner.
var errNoOwnerTables = errors.New("no owner tables")

// startOwner starts `nft -i`, has it make the flow's tracing table flagged owner, and returns once nft has
// listed the table back (so every rule is in place), or fails.
func startOwner(ctx context.Context, f trace.Flow) (*tableOwner, error) {
	o := &tableOwner{exited: make(chan struct{})}
	o.cmd = exec.Command("nft", "-i")
	dieWithParent(o.cmd)
	in, err := o.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := o.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	o.stdin = in
	o.cmd.Stderr = &o.stderr
	if err := o.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting nft -i: %w", err)
	}
	listed := make(chan struct{})
	go func() {
		defer close(o.exited)
		sc := bufio.NewScanner(out)
		seen := false
		for sc.Scan() {
			// The listing ends with the table's closing brace, alone at the start of a line.
			if !seen && sc.Text() == "}" {
				seen = true
				close(listed)
			}
		}
		o.cmd.Wait()
	}()
	if _, err := io.WriteString(in, ownedCommands(f)); err != nil {
		o.close()
		return nil, fmt.Errorf("nft -i: %w", err)
	}
	// nft -i reports a bad line on stderr and goes on with the next: a line that fails shows there (and the
	// table's listing then never comes).
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	failed := func() error {
		time.Sleep(50 * time.Millisecond) // the rest of nft's complaint: the line it failed on
		o.close()
		said := o.stderr.String()
		first := firstError(said)
		// nft echoes the line that failed: the owner flag's (an nft or kernel without owner tables).
		if strings.Contains(said, "flags owner") {
			return fmt.Errorf("%w: %s", errNoOwnerTables, first)
		}
		return fmt.Errorf("nft -i: %s", first)
	}
	for {
		select {
		case <-listed:
			if o.stderr.String() != "" {
				return nil, failed()
			}
			return o, nil
		case <-tick.C:
			if o.stderr.String() != "" {
				return nil, failed()
			}
		case <-o.exited:
			return nil, fmt.Errorf("nft -i exited before the table was made: %s", o.stderr.lastLine())
		case <-ctx.Done():
			o.close()
			return nil, ctx.Err()
		case <-deadline:
			o.close()
			return nil, fmt.Errorf("nft -i did not make the table within 10s: %s", o.stderr.lastLine())
		}
	}
}

// firstError is nft's first error line in what it printed on stderr.
func firstError(stderr string) string {
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "Error") {
			return strings.TrimSpace(l)
		}
	}
	return strings.TrimSpace(stderr)
}

// close ends the owner, and with its socket the table: its stdin closed, nft exits; killed if it does not.
func (o *tableOwner) close() {
	o.once.Do(func() {
		o.stdin.Close()
		select {
		case <-o.exited:
		case <-time.After(5 * time.Second):
			o.cmd.Process.Kill()
			<-o.exited
		}
	})
}

// RemoveOrphans deletes the tracing tables no live trace owns: tables of traces made without an owner (by an
// older k8sguide, or where the kernel has no owner tables) whose process was killed before it removed them. A
// live trace's owned table refuses deletion (only its owner may change it), and is kept.
func RemoveOrphans(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := nftOutput(ctx, "", "list", "tables", "ip")
	if err != nil {
		return nil
	}
	var removed []string
	for _, l := range strings.Split(out, "\n") {
		name, ok := strings.CutPrefix(strings.TrimSpace(l), "table ip ")
		if !ok || !strings.HasPrefix(name, TablePrefix+"-") {
			continue
		}
		if nft(ctx, "", "delete", "table", "ip", name) == nil {
			removed = append(removed, name)
		}
	}
	return removed
}

// RemoveTable deletes a flow's tracing table if it is there.
func RemoveTable(ctx context.Context, f trace.Flow) error {
	err := nft(ctx, "", "delete", "table", "ip", TableName(f))
	if err != nil && strings.Contains(err.Error(), "No such file") {
		return nil
	}
	return err
}

// nft runs nft with args, feeding it stdin (a script for `-f -`).
func nft(ctx context.Context, stdin string, args ...string) error {
	_, err := nftOutput(ctx, stdin, args...)
	return err
}

// nftOutput runs nft with args, feeding it stdin, and returns what it printed.
func nftOutput(ctx context.Context, stdin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "nft", args...)
	cmd.Stdin = strings.NewReader(stdin)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("nft %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return string(out), nil
}

var (
	xtTrace  = regexp.MustCompile(`^\s*TRACE: \d+ [0-9a-f]+ ([^:]+):([^:]+):(rule|policy|return):?(0x[0-9a-f]+)?:?(\S*)\s*(.*)$`)
	nftTrace = regexp.MustCompile(`^trace id [0-9a-f]+ (\S+) (\S+) (\S+) (rule|policy|packet:|verdict)\s*(.*)$`)
	verdict  = regexp.MustCompile(`\s*\(verdict ([^)]*)\)\s*$`)
	counter  = regexp.MustCompile(`counter packets \d+ bytes \d+\s*`)
)

// ParseXtables reads `xtables-monitor --trace` output and returns the events of the flow's first packet
// (the SYN, which is the only one nat rules see), without the tracing table's own events.
func ParseXtables(lines []string, f trace.Flow) []trace.KernelEvent {
	lines = ownPackets(lines, xtID, func(l string) bool {
		return strings.HasPrefix(l, "PACKET:") && strings.Contains(l, fmt.Sprintf(" SPORT=%d DPORT=", f.Sport)) &&
			(!f.Src.IsValid() || strings.Contains(l, " SRC="+f.Src.String()+" "))
	})
	var out []trace.KernelEvent
	syn := false
	packets := 0
	lastPacket := ""
	for _, l := range lines {
		if strings.HasPrefix(l, "PACKET:") {
			lastPacket = l
			// Flags are words of their own; the last one ends the line, with or without a trailing space.
			flags := strings.Fields(l)
			syn = slices.Contains(flags, "SYN") && !slices.Contains(flags, "ACK")
			continue
		}
		m := xtTrace.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		if strings.HasPrefix(m[1], TablePrefix) {
			// Our table sees each packet once where it enters (a packet the node sends to itself comes
			// back in on lo: same packet); a second entry is a retransmission, which says nothing new.
			if m[3] == "rule" && (m[2] == "out" || m[2] == "pre" && !strings.Contains(lastPacket, "IN=lo ")) {
				if packets++; packets > 1 {
					break
				}
			}
			continue
		}
		if !syn || packets == 0 {
			continue
		}
		e := trace.KernelEvent{Table: m[1], Chain: m[2], Kind: m[3], Verdict: xtVerdictName(m[5])}
		text := strings.TrimSpace(m[6])
		// "-4 -t nat -A CHAIN …": keep the iptables-save part.
		if i := strings.Index(text, "-A "); i >= 0 {
			text = text[i:]
		}
		e.Text = text
		if e.Kind == "policy" {
			e.Text = "policy " + e.Verdict
		}
		out = append(out, e)
	}
	return out
}

// xtVerdictName is a verdict as xtables-monitor's trace prints it, with the nf_tables verdicts it prints as
// numbers named: a rule that RETURNs shows as "filter:T1:rule:0x2:0xfffffffb" (iptables 1.8.9, measured), which
// --verify showed raw.
func xtVerdictName(v string) string {
	n, err := strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 32)
	if !strings.HasPrefix(v, "0x") || err != nil {
		return v
	}
	switch int32(uint32(n)) {
	case -1:
		return "CONTINUE"
	case -2:
		return "BREAK"
	case -3:
		return "JUMP"
	case -4:
		return "GOTO"
	case -5:
		return "RETURN"
	}
	return v
}

// ParseNft reads `nft monitor trace` output: the events of the first (SYN) packet, without our table.
// An event of a rule the monitor did not know (see unknownRule) that could not be resolved stays in, with
// "unknown rule handle N" as its text: it is a rule the packet met, and dropping it would hide that.
func ParseNft(lines []string, f trace.Flow) []trace.KernelEvent {
	lines = ownPackets(lines, nftID, nftPacketOf(f))
	var out []trace.KernelEvent
	syn := false
	packets := 0
	for _, l := range lines {
		m := nftTrace.FindStringSubmatch(l)
		if u := unknownRule.FindStringSubmatch(l); u != nil {
			m = []string{l, u[2], u[3], u[4], "rule", "unknown rule handle " + u[5] + u[6]}
		}
		if m == nil {
			continue
		}
		table := m[1] + " " + m[2]
		if strings.HasPrefix(m[2], TablePrefix) {
			// See ParseXtables: one entry into our table per packet, lo loop-backs excepted.
			if m[4] == "packet:" && (m[3] == "out" || m[3] == "pre" && !strings.Contains(l, `iif "lo"`)) {
				if packets++; packets > 1 {
					break
				}
			}
			continue
		}
		if m[4] == "packet:" {
			syn = strings.Contains(l, "tcp flags == syn")
			continue
		}
		if !syn || packets == 0 {
			continue
		}
		e := trace.KernelEvent{Table: table, Chain: m[3], Kind: m[4]}
		rest := m[5]
		if v := verdict.FindStringSubmatch(rest); v != nil {
			e.Verdict = v[1]
			rest = rest[:len(rest)-len(v[0])]
		}
		if e.Kind == "policy" {
			f := strings.Fields(rest)
			if len(f) > 0 {
				e.Verdict = f[0]
			}
			e.Text = "policy " + e.Verdict
		} else {
			e.Text = NormalizeNft(rest)
		}
		out = append(out, e)
	}
	return out
}

var (
	xtID  = regexp.MustCompile(`^\s*(?:TRACE|PACKET): \d+ ([0-9a-f]+) `)
	nftID = regexp.MustCompile(`^trace id ([0-9a-f]+) `)
)

// ownPackets keeps the lines of our flow's packets. Trace events are per network namespace, so a concurrent
// trace of another flow on the same node shows up in our monitor too. Every event carries an id; a packet
// keeps it through a hook, but may get a new one between hooks (seen when br_netfilter hands a pod's packet
// to IP forwarding), and each hook starts with a packet line that shows the addresses and ports. So an id is
// ours when one of its packet lines shows our flow (its source port is ours until SNAT, which comes last).
func ownPackets(lines []string, id *regexp.Regexp, ourPacket func(string) bool) []string {
	ours := ownIDs(lines, id, ourPacket)
	var out []string
	for _, l := range lines {
		if m := id.FindStringSubmatch(l); m != nil && ours[m[1]] {
			out = append(out, l)
		}
	}
	return out
}

// ownIDs are the trace ids of our flow's packets (see ownPackets).
func ownIDs(lines []string, id *regexp.Regexp, ourPacket func(string) bool) map[string]bool {
	ours := map[string]bool{}
	for _, l := range lines {
		if m := id.FindStringSubmatch(l); m != nil && ourPacket(l) {
			ours[m[1]] = true
		}
	}
	return ours
}

// nftPacketOf says whether an `nft monitor trace` line is a packet line of flow f.
func nftPacketOf(f trace.Flow) func(string) bool {
	return func(l string) bool {
		return strings.Contains(l, " packet: ") && strings.Contains(l, fmt.Sprintf(" %s sport %d ", f.Proto, f.Sport)) &&
			(!f.Src.IsValid() || strings.Contains(l, " ip saddr "+f.Src.String()+" "))
	}
}

// NormalizeNft makes nft rule text comparable between `nft list` and `nft monitor trace`: no counters, no
// handle comment, single spaces.
func NormalizeNft(s string) string {
	if i := strings.Index(s, " # handle "); i >= 0 {
		s = s[:i]
	}
	s = counter.ReplaceAllString(s, "")
	return strings.Join(strings.Fields(s), " ")
}
