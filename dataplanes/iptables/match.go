package iptables

import (
	"cmp"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
	"github.com/k8sguide/k8sguide/dataplanes/netstate"
)

// cond is one condition of a rule: an option of the core (-s, -d, -p, -i, -o) or of a match module.
type cond struct {
	module string // "" for the core
	opt    string // "-s", "--dport", "--dst-type", …
	neg    bool
	vals   []string
}

// matcher is a rule compiled for evaluation.
type matcher struct {
	conds      []cond
	target     string
	isGoto     bool
	targetArgs []string
	comment    string
	service    string // the Service the comment names (trace.ServiceFromComment), "" if none
	// dst is the rule's plain `-d` (one address or prefix, not negated), if it has one: a quiet walk passes
	// over a rule whose dst cannot hold the packet's destination without evaluating it.
	dst netip.Prefix
	// dport is its plain `--dport N` of tcp, udp or sctp (one port, not negated; 0 when it has none), which a
	// quiet walk checks the same way.
	dport uint16
	// notes are what one evaluation could not check (a copy of the compiled matcher gathers them).
	notes []string
	// unknown names what the input lacks to tell whether the rule matches (a host name where `iptables -L`
	// printed one instead of an address): the walk cannot go on past it.
	unknown string
}

// options that take no value.
var flagOpts = map[string]bool{
	"--rcheck": true, "--update": true, "--set": true, "--remove": true, "--reap": true, "--rsource": true,
	"--rdest": true, "--random-fully": true, "--random": true, "--persistent": true, "-f": true,
	"--syn": true, "--interfaces-hidden": true, "--limit-iface-in": true, "--limit-iface-out": true,
}

func compile(args []string) *matcher {
	m := &matcher{}
	module := ""
	neg := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch a {
		case "!":
			neg = true
			continue
		case "-m", "--match":
			if i+1 < len(args) {
				i++
				module = args[i]
			}
			continue
		case "-j", "--jump", "-g", "--goto":
			if i+1 < len(args) {
				m.target = args[i+1]
				m.isGoto = a == "-g" || a == "--goto"
				m.targetArgs = args[i+2:]
			}
			return m
		}
		if !strings.HasPrefix(a, "-") {
			continue // a stray word: nothing to evaluate
		}
		c := cond{opt: canonical(a), neg: neg}
		neg = false
		if c.opt == "-s" || c.opt == "-d" || c.opt == "-p" || c.opt == "-i" || c.opt == "-o" {
			c.module = ""
		} else {
			c.module = module
		}
		if !flagOpts[a] {
			n := 1
			if a == "--match-set" {
				n = 2
			}
			for k := 0; k < n && i+1 < len(args); k++ {
				i++
				c.vals = append(c.vals, args[i])
			}
		}
		if c.opt == "--comment" && len(c.vals) > 0 {
			m.comment = c.vals[0]
		}
		m.conds = append(m.conds, c)
	}
	return m
}

func canonical(opt string) string {
	switch opt {
	case "--source", "--src":
		return "-s"
	case "--destination", "--dst":
		return "-d"
	case "--protocol":
		return "-p"
	case "--in-interface":
		return "-i"
	case "--out-interface":
		return "-o"
	case "--destination-port":
		return "--dport"
	case "--source-port":
		return "--sport"
	}
	return opt
}

func (m *matcher) targetOpt(name string) string {
	for i := 0; i+1 < len(m.targetArgs); i++ {
		if m.targetArgs[i] == name {
			return m.targetArgs[i+1]
		}
	}
	return ""
}

func (m *matcher) hasTargetFlag(name string) bool {
	for _, a := range m.targetArgs {
		if a == name {
			return true
		}
	}
	return false
}

func (m *matcher) first(module, opt string) (cond, bool) {
	for _, c := range m.conds {
		if c.module == module && c.opt == opt {
			return c, true
		}
	}
	return cond{}, false
}

// evaluate says whether the rule matches the walk's packet, and if not, why. Conditions are checked in
// order; the random statistic match is checked last, so a walk only forks where the rest of the rule
// matched (the kernel also evaluates matches in order and stops at the first miss; the random draw of a
// rule that fails another condition changes nothing).
func (m *matcher) evaluate(w *netfilter.Walk) (bool, string, float64) {
	var statistic *cond
	unknown := ""
	m.unknown = ""
	for i := range m.conds {
		c := &m.conds[i]
		if c.module == "statistic" && c.opt == "--mode" {
			statistic = c
			continue
		}
		m.unknown = ""
		ok, reason := m.check(w, c)
		if m.unknown != "" {
			// Not known; a later condition that surely fails still decides the rule (the kernel ANDs them).
			unknown = cmp.Or(unknown, m.unknown)
			continue
		}
		if !ok {
			m.unknown = ""
			return false, reason, 0
		}
	}
	if unknown != "" {
		// Whether a masquerade matches is the source's question, which the walk answers as unknown on its own;
		// any other rule's is a fact the walk may be made again with each answer to (see Walk.Suppose).
		v, ok := false, false
		if m.target != "MASQUERADE" && m.target != "SNAT" {
			v, ok = w.Suppose(unknown)
		}
		if !ok {
			m.unknown = unknown
			return false, "not known: " + unknown, 0
		}
		m.unknown = ""
		if !v {
			return false, "not known, taken as not matching: " + unknown, 0
		}
	}
	if statistic != nil {
		return m.random(w, statistic)
	}
	return true, "", 0
}

// random evaluates -m statistic: iptables stores lround(0x80000000 * P) and the kernel matches when
// (random_u32 & 0x7FFFFFFF) < stored, so the exact chance is stored / 2^31.
func (m *matcher) random(w *netfilter.Walk, c *cond) (bool, string, float64) {
	mode := first(c.vals)
	if mode != "random" {
		m.notes = append(m.notes, fmt.Sprintf("statistic --mode %s depends on a packet counter; the trace assumes it matches", mode))
		return true, "", 0
	}
	pc, ok := m.first("statistic", "--probability")
	if !ok {
		return true, "", 0
	}
	p, err := strconv.ParseFloat(first(pc.vals), 64)
	if err != nil || p < 0 || p > 1 {
		return true, "", 0
	}
	stored := math.Round(0x80000000 * p)
	if stored > 0x7FFFFFFF {
		stored = 0x7FFFFFFF // iptables caps the stored value; the kernel then matches all but 1 in 2^31
	}
	exact := stored / 0x80000000
	neg := c.neg || pc.neg
	pMatch := exact
	if neg {
		pMatch = 1 - exact
	}
	if w.Choose([]float64{pMatch, 1 - pMatch}) == 0 {
		return true, fmt.Sprintf("random draw: matched (chance %.11f)", pMatch), pMatch
	}
	return false, fmt.Sprintf("random draw: not this rule (chance %.11f that it matches)", pMatch), pMatch
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// check evaluates one deterministic condition; the reason explains a miss.
func (m *matcher) check(w *netfilter.Walk, c *cond) (bool, string) {
	ok, what := m.test(w, c)
	if c.neg {
		ok = !ok
	}
	if ok {
		return true, ""
	}
	neg := ""
	if c.neg {
		neg = "! "
	}
	wants := neg + c.opt
	if len(c.vals) > 0 {
		wants += " " + strings.Join(c.vals, " ")
	}
	return false, fmt.Sprintf("%s (rule wants %s)", what, wants)
}

// test evaluates a condition without its negation and describes the packet's side of it.
func (m *matcher) test(w *netfilter.Walk, c *cond) (bool, string) {
	p := &w.Pkt
	v := first(c.vals)
	switch c.module + c.opt {
	case "-s", "-d":
		ip, side := p.Src, "source"
		if c.opt == "-d" {
			ip, side = p.Dst, "destination"
		}
		if !addressLike(v) {
			// `iptables -L` without -n prints the names reverse DNS gave the addresses; offline they cannot
			// be turned back.
			m.unknown = fmt.Sprintf("the address of %q (%s %s in a rule): `iptables -L` printed a name, not the address; paste `iptables -L -n` or iptables-save", v, c.opt, v)
			return false, ""
		}
		return prefixHas(v, ip), fmt.Sprintf("%s %s", side, ip)
	case "-p":
		return protoIs(p.Proto, v), fmt.Sprintf("protocol %s", p.Proto)
	case "-i":
		return ifaceIs(p.Iif, v), fmt.Sprintf("input interface %s", orNone(p.Iif))
	case "-o":
		if w.Net.OutAssumed && p.Oif != "lo" {
			// A pasted dump has no routes: the interface the packet leaves by was assumed, and this rule
			// would decide on it (`! -o cbr0 -j MASQUERADE` masquerades only what does not go to the node's
			// own pods).
			m.unknown = fmt.Sprintf("the interface the packet leaves by (-o %s in a rule): the input has no routes, and %s was only assumed; --out-iface tells", v, orNone(p.Oif))
			return false, ""
		}
		return ifaceIs(p.Oif, v), fmt.Sprintf("output interface %s", orNone(p.Oif))
	}
	switch c.opt {
	case "--dport", "--dports", "--destination-ports":
		if strings.Trim(v, "0123456789:,") != "" {
			m.unknown = fmt.Sprintf("the number of port %q (%s in a rule): a name this k8sguide does not know; paste `iptables -L -n` or iptables-save", v, c.opt)
			return false, ""
		}
		return portIn(p.Dport, v), fmt.Sprintf("destination port %d", p.Dport)
	case "--sport", "--sports", "--source-ports":
		if p.Sport == 0 {
			m.notes = append(m.notes, "a rule tests the source port, which the trace was not given: it assumes a match (pass --src IP:PORT)")
			return !c.neg, "source port unknown"
		}
		return portIn(p.Sport, v), fmt.Sprintf("source port %d", p.Sport)
	case "--ports":
		return portIn(p.Dport, v) || portIn(p.Sport, v), fmt.Sprintf("ports %d/%d", p.Sport, p.Dport)
	case "--comment", "--nfacct-name":
		return !c.neg, ""
	case "--dst-type", "--src-type":
		ip := p.Dst
		side := "destination"
		if c.opt == "--src-type" {
			ip, side = p.Src, "source"
		}
		typ := w.Net.LocalType(ip)
		if typ == "" {
			typ = "unicast"
		}
		if w.Net.LocalUnknown(ip) {
			// The node's addresses were not given: this one may be among them (the kernel's answer decides
			// kube-proxy's and Docker's NodePort and published-port rules). One fact for the whole walk.
			local, ok := w.Suppose(netstate.LocalFact(ip))
			if !ok {
				m.unknown = netstate.LocalFact(ip)
				return false, ""
			}
			if local {
				typ = "local"
			}
		}
		for _, want := range strings.Split(v, ",") {
			if strings.EqualFold(want, typ) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%s %s is %s on this node", side, ip, strings.ToUpper(typ))
	case "--mark":
		val, mask, err := parseMark(v)
		if err != nil {
			return !c.neg, ""
		}
		return p.Mark&mask == val, fmt.Sprintf("mark %#x", p.Mark)
	case "--ctstate", "--state":
		for _, s := range strings.Split(v, ",") {
			if p.HasCtState(s) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("conntrack state %s", strings.Join(p.CtState, ","))
	case "--rcheck", "--update":
		return m.recent(w)
	case "--set", "--remove", "--seconds", "--reap", "--name", "--rsource", "--rdest", "--mask", "--hitcount", "--rttl":
		return !c.neg, ""
	case "--match-set":
		set, ok := w.Net.IPSet(v)
		if !ok {
			// A node's own snapshot holds every set its rules name (iptables refuses a rule on a set that
			// does not exist), so only a pasted dump gets here: whether the packet is in the set is not known.
			m.unknown = fmt.Sprintf("ipset %s (a rule tests it; the input does not hold it: paste `ipset list %s` too)", v, v)
			if strings.HasPrefix(v, "KUBE-") {
				// kube-proxy's IPVS mode's sets: its iptables rules only mark and accept, IPVS picks the backend.
				m.unknown = fmt.Sprintf("ipset %s and the IPVS table (a rule tests the set, one of kube-proxy's IPVS-mode sets: on such a node IPVS, not iptables, picks the backend; paste `ipset list` and `ipvsadm -Ln` too)", v)
			}
			return false, ""
		}
		dirs := ""
		if len(c.vals) > 1 {
			dirs = c.vals[1]
		}
		in, key := set.Match(dirs, netstate.SetPacket{Src: p.Src, Dst: p.Dst, Sport: p.Sport, Dport: p.Dport, Proto: p.Proto})
		if in {
			return true, fmt.Sprintf("%s is in %s", key, v)
		}
		if !set.Complete() {
			m.unknown = fmt.Sprintf("whether %s is in ipset %s: %s", key, v, set.Incomplete)
			return false, ""
		}
		return false, fmt.Sprintf("%s is not in ipset %s", key, v)
	case "--interfaces-hidden":
		// `iptables -L` without -v prints no interfaces. A rule that shows no condition at all and decides
		// the packet is, as often as not, one that tests an interface (`-A INPUT -i lo -j ACCEPT` prints
		// as "ACCEPT all -- anywhere anywhere"): not known. Any other rule is read as testing none, and the
		// trace says it assumed so.
		visible := false
		for _, o := range m.conds {
			if o.opt != "--interfaces-hidden" && o.opt != "--comment" {
				visible = true
			}
		}
		switch m.target {
		case "ACCEPT", "DROP", "REJECT", "RETURN":
			if !visible {
				m.unknown = "the interfaces this rule tests: `iptables -L` prints them only with -v, and a rule that shows no condition, like this one, usually tests one (`-i lo -j ACCEPT` prints as \"ACCEPT all -- anywhere anywhere\"); paste `iptables -L -v`"
				return false, ""
			}
		}
		m.notes = append(m.notes, "assumed: the rules the packet matched test no interface (`iptables -L` without -v does not print them; -v does)")
		return true, ""
	case "--mode", "--probability", "--every", "--packet":
		return !c.neg, ""
	case "--limit-iface-in", "--limit-iface-out", "--tcp-flags", "--syn", "--icmp-type", "--physdev-in", "--physdev-out", "--physdev-is-bridged":
		return !c.neg, ""
	}
	m.notes = append(m.notes, fmt.Sprintf("the trace does not evaluate %s %s (-m %s); it assumes a match", c.opt, v, c.module))
	return !c.neg, ""
}

// recent evaluates -m recent --rcheck/--update: a match when the source was seen within --seconds.
func (m *matcher) recent(w *netfilter.Walk) (bool, string) {
	name := "DEFAULT"
	if c, ok := m.first("recent", "--name"); ok {
		name = first(c.vals)
	}
	ip := w.Pkt.Src
	if _, ok := m.first("recent", "--rdest"); ok {
		ip = w.Pkt.Dst
	}
	if !w.Net.HasRecent(name) && w.Net.Recent == nil {
		m.notes = append(m.notes, "the input holds no xt_recent lists: the trace assumes this client has no session-affinity entry yet")
		return false, fmt.Sprintf("%s is not in recent list %s (no lists in the input)", ip, name)
	}
	age, ok := w.Net.RecentAge(name, ip)
	if !ok {
		return false, fmt.Sprintf("%s is not in recent list %s", ip, name)
	}
	if c, ok := m.first("recent", "--seconds"); ok {
		limit, _ := strconv.ParseFloat(first(c.vals), 64)
		if limit > 0 && age > limit {
			return false, fmt.Sprintf("%s was last seen in %s %.0fs ago, more than --seconds %s", ip, name, age, first(c.vals))
		}
	}
	return true, ""
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// addressLike says whether an -s/-d value is an address or prefix (rather than a host name).
func addressLike(s string) bool {
	a, _, _ := strings.Cut(s, "/")
	_, err := netip.ParseAddr(a)
	return err == nil
}

func prefixHas(s string, ip netip.Addr) bool {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		return err == nil && a == ip
	}
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked().Contains(ip)
	}
	// A dotted mask (10.0.0.0/255.0.0.0).
	a, m, _ := strings.Cut(s, "/")
	addr, err1 := netip.ParseAddr(a)
	mask, err2 := netip.ParseAddr(m)
	if err1 != nil || err2 != nil || !addr.Is4() || !mask.Is4() {
		return false
	}
	x, y, z := addr.As4(), mask.As4(), ip.As4()
	for i := range 4 {
		if x[i]&y[i] != z[i]&y[i] {
			return false
		}
	}
	return true
}

func protoIs(pkt, want string) bool {
	switch want {
	case "all", "0":
		return true
	case "6":
		want = "tcp"
	case "17":
		want = "udp"
	case "132":
		want = "sctp"
	}
	return strings.EqualFold(pkt, want)
}

func ifaceIs(iface, want string) bool {
	if iface == "" {
		return false
	}
	if strings.HasSuffix(want, "+") {
		return strings.HasPrefix(iface, strings.TrimSuffix(want, "+"))
	}
	return iface == want
}

// portIn tests a port against "N", "N:M" or a multiport list "A,B:C".
func portIn(port uint16, spec string) bool {
	for _, part := range strings.Split(spec, ",") {
		lo, hi, isRange := strings.Cut(part, ":")
		a, err := strconv.ParseUint(lo, 10, 16)
		if err != nil {
			if lo == "" {
				a = 0
			} else {
				continue
			}
		}
		b := a
		if isRange {
			b = 65535
			if hi != "" {
				if v, err := strconv.ParseUint(hi, 10, 16); err == nil {
					b = v
				}
			}
		}
		if uint64(port) >= a && uint64(port) <= b {
			return true
		}
	}
	return false
}
