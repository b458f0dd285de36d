package iptables

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes"
	"github.com/k8sguide/k8sguide/dataplanes/netfilter"
)

// IsListing says whether text looks like `iptables -L -n [-v]` output rather than iptables-save.
func IsListing(text string) bool {
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "$") || strings.HasPrefix(l, "#") {
			continue
		}
		return strings.HasPrefix(l, "Chain ") || strings.HasPrefix(l, "pkts ") || strings.HasPrefix(l, "target ")
	}
	return false
}

// ParseListing reads `iptables [-t TABLE] -L -n [-v] [CHAIN]` output, the form the guide's walkthroughs
// show, into rules. The listing does not name its table: table says which (nat when ""). Each rule's Text is
// the listing line as printed (counters removed); its Args are the equivalent iptables-save words.
// Shell prompts (`$ …`) between listings are skipped, so a walkthrough pasted whole parses.
func ParseListing(text, table string) (*Rules, error) { return parseListing(text, table, false) }

// parseListing is ParseListing of output whose command said -v (its counter columns come first even where grep
// left out the header that says so).
func parseListing(text, table string, verbose bool) (*Rules, error) {
	r := &Rules{Tables: map[string]*Table{}, Partial: true}
	t := r.table(orNat(table))
	var c *Chain
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024) // grows for a long line; a small start keeps a small parse cheap
	n := 0
	for sc.Scan() {
		n++
		raw := sc.Text()
		line := strings.TrimSpace(raw)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "{{"):
			continue
		case strings.HasPrefix(line, "$"):
			// A shell prompt: `$ iptables -t nat -nvL KUBE-SERVICES | grep …` names the chain the lines
			// below come from even when grep removed its header.
			c = nil
			if name := promptChain(line); name != "" {
				c = t.chain(name)
			}
		case strings.HasPrefix(line, "Chain "):
			f := strings.Fields(line)
			if len(f) < 2 {
				return nil, fmt.Errorf("line %d: chain header without a name", n)
			}
			c = t.chain(f[1])
			// A chain listed again (walkthroughs list OUTPUT more than once) replaces the earlier listing.
			c.Rules = nil
			if len(f) >= 4 && f[2] == "(policy" {
				// `(policy DROP 0 packets, 0 bytes)` with -v, `(policy DROP)` without.
				c.Policy = strings.TrimSuffix(f[3], ")")
			}
		case strings.HasPrefix(line, "pkts "):
			verbose = true
		case strings.HasPrefix(line, "target "):
			verbose = false
		case dataplanes.Elision(line):
			// Lines the paste left out of this chain: the walk cannot tell what they did.
			if c != nil {
				c.Rules = append(c.Rules, &Rule{Text: line, Elided: true})
			}
		default:
			if c == nil {
				return nil, fmt.Errorf("line %d: a rule with no \"Chain\" header (or `$ iptables … CHAIN` prompt) before it: %q", n, truncate(line))
			}
			rule, err := parseListingRule(line, verbose)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			if !hasRule(c, rule.Text) {
				c.Rules = append(c.Rules, rule)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(t.Chains) == 0 {
		return nil, fmt.Errorf("no chains in the listing")
	}
	r.completeKubeProxy()
	return r, nil
}

// promptChain finds the chain a shell prompt lists: the first word that looks like a chain name.
func promptChain(line string) string {
	for _, w := range strings.Fields(line) {
		if w == "|" {
			break
		}
		if len(w) > 1 && strings.ToUpper(w) == w && strings.Trim(w, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") == "" && w[0] >= 'A' && w[0] <= 'Z' {
			return w
		}
	}
	return ""
}

// parseListingRule turns `pkts bytes target prot opt in out source destination extras…` into save words.
func parseListingRule(line string, verbose bool) (*Rule, error) {
	f := strings.Fields(line)
	want := 5
	if verbose {
		want = 9
	}
	if len(f) < want {
		return nil, fmt.Errorf("short listing rule: %q", truncate(line))
	}
	text := line
	if verbose {
		f = f[2:]
		// Keep the line as printed, minus the two counter columns.
		rest := strings.TrimLeft(line, " ")
		for i := 0; i < 2; i++ {
			rest = strings.TrimLeft(rest[strings.IndexAny(rest+" ", " "):], " ")
		}
		text = rest
	}
	tgt, prot, opt := f[0], f[1], f[2]
	var in, out string
	var src, dst string
	var extra []string
	if verbose {
		in, out, src, dst = f[3], f[4], f[5], f[6]
		extra = f[7:]
	} else {
		src, dst = f[3], f[4]
		extra = f[5:]
	}
	// A target column can be empty (a rule with no target); then "prot" is shifted. The guide's listings
	// always have targets, so only check the obvious shape.
	_ = opt
	var args []string
	neg := func(v string) (bool, string) {
		if strings.HasPrefix(v, "!") {
			return true, v[1:]
		}
		return false, v
	}
	if n, v := neg(prot); v != "all" && v != "0" {
		if n {
			args = append(args, "!")
		}
		args = append(args, "-p", v)
	}
	for _, x := range []struct{ flag, v, any string }{{"-i", in, "*"}, {"-o", out, "*"}, {"-s", src, "0.0.0.0/0"}, {"-d", dst, "0.0.0.0/0"}} {
		// Without -n, iptables prints "anywhere" for 0.0.0.0/0 and "any" for no interface.
		if x.v == "" || x.v == x.any || x.v == "anywhere" && (x.flag == "-s" || x.flag == "-d") || x.v == "any" && (x.flag == "-i" || x.flag == "-o") {
			continue
		}
		n, v := neg(x.v)
		if name, mask, cut := strings.Cut(v, "/"); listedNames[name] != "" {
			v = listedNames[name]
			if cut {
				v += "/" + mask
			}
		}
		if n {
			args = append(args, "!")
		}
		if (x.flag == "-s" || x.flag == "-d") && !strings.Contains(v, "/") {
			v += "/32"
		}
		args = append(args, x.flag, v)
	}
	if !verbose {
		// In and out interfaces are columns of -v only: what this rule tests there is not shown.
		args = append(args, "-m", "listing", "--interfaces-hidden")
	}
	targetArgs, err := listingExtras(extra, &args)
	if err != nil {
		return nil, err
	}
	args = append(args, "-j", tgt)
	args = append(args, targetArgs...)
	return &Rule{Text: text, args: args}, nil
}

// listedNames are the names `iptables -L` prints without -n for addresses every distribution's /etc/hosts and
// /etc/networks give the same way (netbase's networks file: `loopback 127.0.0.0`, `link-local 169.254.0.0`):
// "!loopback/8  loopback/8" is kube-proxy's KUBE-FIREWALL rule as iptables -L prints it.
var listedNames = map[string]string{"localhost": "127.0.0.1", "loopback": "127.0.0.0", "link-local": "169.254.0.0"}

// listingExtras converts the free-form match and target text at the end of a listing line.
func listingExtras(x []string, args *[]string) ([]string, error) {
	var targetArgs []string
	for i := 0; i < len(x); i++ {
		w := x[i]
		next := func() string {
			if i+1 < len(x) {
				i++
				return x[i]
			}
			return ""
		}
		switch {
		case w == "/*":
			var c []string
			for i+1 < len(x) && x[i+1] != "*/" {
				i++
				c = append(c, x[i])
			}
			i++ // */
			*args = append(*args, "-m", "comment", "--comment", strings.Join(c, " "))
		case w == "tcp" || w == "udp" || w == "sctp":
			*args = append(*args, "-m", w)
			for i+1 < len(x) {
				p := x[i+1]
				n := strings.HasPrefix(p, "!")
				p = strings.TrimPrefix(p, "!")
				var flag string
				switch {
				case strings.HasPrefix(p, "dpt:"), strings.HasPrefix(p, "dpts:"):
					flag = "--dport"
				case strings.HasPrefix(p, "spt:"), strings.HasPrefix(p, "spts:"):
					flag = "--sport"
				default:
					flag = ""
				}
				if flag == "" {
					break
				}
				i++
				_, v, _ := strings.Cut(p, ":")
				v = portNumbers(v)
				if n {
					*args = append(*args, "!")
				}
				*args = append(*args, flag, v)
			}
		case w == "ADDRTYPE" && i+1 < len(x) && x[i+1] == "match":
			i++
			for i+1 < len(x) {
				k := x[i+1]
				n := false
				if k == "!" {
					n = true
					if i+2 >= len(x) {
						break
					}
					k = x[i+2]
				}
				if k != "dst-type" && k != "src-type" {
					break
				}
				if n {
					i++
				}
				i++
				v := next()
				if strings.HasPrefix(v, "!") {
					n, v = !n, v[1:]
				}
				*args = append(*args, "-m", "addrtype")
				if n {
					*args = append(*args, "!")
				}
				*args = append(*args, "--"+k, v)
			}
		case w == "statistic" && i+1 < len(x) && x[i+1] == "mode":
			i++
			mode := next()
			*args = append(*args, "-m", "statistic", "--mode", mode)
			for i+1 < len(x) && (x[i+1] == "probability" || x[i+1] == "every" || x[i+1] == "packet") {
				k := next()
				*args = append(*args, "--"+k, next())
			}
		case w == "mark" && i+1 < len(x) && x[i+1] == "match":
			i++
			v := next()
			*args = append(*args, "-m", "mark")
			if v == "!" {
				*args = append(*args, "!")
				v = next()
			}
			*args = append(*args, "--mark", v)
		case w == "ctstate" || w == "state":
			v := next()
			n := false
			if v == "!" {
				n, v = true, next()
			}
			*args = append(*args, "-m", "conntrack")
			if n {
				*args = append(*args, "!")
			}
			*args = append(*args, "--ctstate", v)
		case w == "match-set":
			name := next()
			dir := next()
			*args = append(*args, "-m", "set", "--match-set", name, dir)
		case w == "!" && i+1 < len(x) && x[i+1] == "match-set":
			i++
			name := next()
			dir := next()
			*args = append(*args, "-m", "set", "!", "--match-set", name, dir)
		case w == "recent:":
			// recent: CHECK seconds: 10800 reap name: KUBE-SEP-… side: source mask: 255.255.255.255
			*args = append(*args, "-m", "recent")
			for more := true; more && i+1 < len(x); {
				k := x[i+1]
				switch k {
				case "CHECK":
					*args = append(*args, "--rcheck")
				case "SET":
					*args = append(*args, "--set")
				case "UPDATE":
					*args = append(*args, "--update")
				case "REMOVE":
					*args = append(*args, "--remove")
				case "reap":
					*args = append(*args, "--reap")
				case "seconds:":
					i++
					*args = append(*args, "--seconds", next())
					continue
				case "name:":
					i++
					*args = append(*args, "--name", next())
					continue
				case "side:":
					i++
					if next() == "dest" {
						*args = append(*args, "--rdest")
					} else {
						*args = append(*args, "--rsource")
					}
					continue
				case "mask:":
					i++
					*args = append(*args, "--mask", next())
					continue
				default:
					more = false
					continue
				}
				i++
			}
		case strings.HasPrefix(w, "to:"):
			targetArgs = append(targetArgs, "--to-destination", strings.TrimPrefix(w, "to:"))
		case w == "random-fully":
			targetArgs = append(targetArgs, "--random-fully")
		case w == "MARK":
			op := next()
			v := next()
			switch op {
			case "or":
				targetArgs = append(targetArgs, "--or-mark", v)
			case "xset":
				targetArgs = append(targetArgs, "--set-xmark", v)
			case "set":
				targetArgs = append(targetArgs, "--set-mark", v)
			case "and":
				targetArgs = append(targetArgs, "--and-mark", v)
			case "xor":
				targetArgs = append(targetArgs, "--xor-mark", v)
			}
		case w == "reject-with":
			targetArgs = append(targetArgs, "--reject-with", next())
		case w == "nfacct-name":
			*args = append(*args, "-m", "nfacct", "--nfacct-name", next())
		default:
			// Anything else is kept as an unknown match the tracer will say it assumed.
			*args = append(*args, "-m", "listing", "--text", w)
		}
	}
	return targetArgs, nil
}

// portNumbers turns the service names `iptables -L` prints without -n (`dpt:http`, `dpts:http:https`) into
// numbers; a name it does not know is kept, and the rule then matches no port.
func portNumbers(v string) string {
	if strings.Contains(v, ",") {
		return v
	}
	parts := strings.Split(v, ":")
	for i, p := range parts {
		if n, ok := netfilter.PortNumber(p); ok {
			parts[i] = strconv.Itoa(int(n))
		}
	}
	return strings.Join(parts, ":")
}

func hasRule(c *Chain, text string) bool {
	for _, r := range c.Rules {
		if r.Text == text {
			return true
		}
	}
	return false
}
