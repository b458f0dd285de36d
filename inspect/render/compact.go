package render

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/k8sguide/k8sguide/dataplanes/trace"
)

// compactHopTable prints hops one line each, fitted to the width, under a line naming each hook: a run of rules
// that did not match is one line per chain, rule text is cut in the middle (its comment and its target kept),
// results are a few words, and a run of hops the same as in path 1 (first) is one line. A program's map
// lookups (ebpf) show the function, the map and what was looked up. -o wide prints everything.
func compactHopTable(w io.Writer, hops, first []trace.Hop, o TraceOptions) error {
	functions := slices.ContainsFunc(hops, func(h trace.Hop) bool { return h.Function != "" })
	// One nftables table holds all of kube-proxy's chains: its name once, in the header, not on every line.
	table := ""
	if len(hops) > 0 && strings.Contains(hops[0].Table, " ") && !functions {
		table = hops[0].Table
		for _, h := range hops {
			if h.Table != table {
				table = ""
				break
			}
		}
	}
	where := func(h trace.Hop) string {
		if table != "" {
			return h.Chain
		}
		return h.Table + "/" + h.Chain
	}
	var rows [][]string
	lastHook := ""
	// section starts a hook's lines when h is in another hook than the line before; it says whether it did.
	section := func(h trace.Hop) bool {
		if h.Hook == lastHook {
			return false
		}
		lastHook = h.Hook
		title := h.Hook + ":"
		if functions && h.Chain != "" {
			title = fmt.Sprintf("%s (%s):", h.Hook, h.Chain)
		}
		rows = append(rows, []string{title})
		return true
	}
	asInFirst := func(h trace.Hop) bool {
		return slices.ContainsFunc(first, func(f trace.Hop) bool { return sameHopAndResult(f, h) })
	}
	for i := 0; i < len(hops); i++ {
		h := hops[i]
		started := section(h)
		if j := runEnd(hops, i, asInFirst); j-i > 1 {
			// A section line names every hook the run crosses: the one just started, or, when the run begins
			// inside the hook of the lines above, one of its own for the hooks after it.
			hooks := []string{}
			for _, x := range hops[i:j] {
				if !slices.Contains(hooks, x.Hook) {
					hooks = append(hooks, x.Hook)
				}
			}
			switch {
			case len(hooks) > 1 && started:
				rows[len(rows)-1] = []string{strings.Join(hooks, ", ") + ":"}
			case len(hooks) > 1:
				rows = append(rows, []string{fmt.Sprintf("%s (from %s on):", strings.Join(hooks, ", "), hooks[0])})
			}
			what := fmt.Sprintf("(%d rules as in path 1)", j-i)
			if functions {
				rows = append(rows, []string{"", "", what})
			} else {
				rows = append(rows, []string{where(h) + " …", "", what, "same as path 1"})
			}
			lastHook = hops[j-1].Hook
			i = j - 1
			continue
		}
		if !h.Matched && h.Probability == 0 {
			j := runEnd(hops, i, func(x trace.Hop) bool {
				return !x.Matched && x.Chain == h.Chain && x.Table == h.Table && x.Probability == 0
			})
			if j-i > 1 {
				span, what := fmt.Sprintf("%d-%d", h.Rule, hops[j-1].Rule), "rules"
				if h.Rule == 0 {
					span, what = "", "lookups"
				}
				if functions {
					rows = append(rows, []string{fmt.Sprintf("(%d %s)", j-i, what), h.Table, "no match (-o wide: why)"})
				} else {
					rows = append(rows, []string{where(h), span, fmt.Sprintf("(%d %s)", j-i, what), "no match (-o wide: why)"})
				}
				i = j - 1
				continue
			}
		}
		if functions {
			// What was looked up (the key, in words and bytes) is in -o wide; the result says what was found.
			rows = append(rows, []string{h.Function, h.Table, compactResult(h)})
			continue
		}
		rule := strconv.Itoa(h.Rule)
		if h.Rule == 0 {
			rule = ""
		}
		rows = append(rows, []string{where(h), rule, ruleText(h), compactResult(h)})
	}
	if len(rows) == 0 {
		return nil
	}
	if functions {
		return FitTable(w, o.width(), []string{"FUNCTION", "MAP", "RESULT"}, rows,
			[]Column{{Min: 24, Soft: 36}, {Min: 16, Soft: 23, Shorten: ShortenEnd}, {Min: 30, Soft: 40}})
	}
	header := []string{"TABLE/CHAIN", "#", "RULE", "RESULT"}
	if table != "" {
		header[0] = "CHAIN (" + table + ")"
	}
	return FitTable(w, o.width(), header, rows,
		[]Column{{Min: 18, Soft: 20, Shorten: ShortenEnd}, {}, {Min: 24, Soft: 36, Shorten: shortenRule}, {Min: 30, Soft: 44}})
}

// runEnd is the end of the run of hops from i on that satisfy in.
func runEnd(hops []trace.Hop, i int, in func(trace.Hop) bool) int {
	j := i
	for j < len(hops) && in(hops[j]) {
		j++
	}
	return j
}

func sameHopAndResult(a, b trace.Hop) bool {
	return a.Hook == b.Hook && a.Table == b.Table && a.Chain == b.Chain && a.Rule == b.Rule && a.Text == b.Text &&
		a.Matched == b.Matched && a.Verdict == b.Verdict && a.Reason == b.Reason && slices.Equal(a.Changes, b.Changes)
}

// ruleText is a hop's rule without what the chain column already says (iptables-save's "-A CHAIN").
func ruleText(h trace.Hop) string {
	return strings.TrimPrefix(h.Text, "-A "+h.Chain+" ")
}

var (
	// A rule's comment: iptables' --comment "…" (or a bare word), nft's comment "…".
	commentRE    = regexp.MustCompile(`--comment ("[^"]*"|\S+)`)
	nftCommentRE = regexp.MustCompile(`\bcomment ("[^"]*")`)
	// An iptables rule's target: the last -j or -g and what follows.
	targetRE = regexp.MustCompile(`.* (-[jg] .*)$`)
	// An IPVS scheduler's turn, as the ipvs walker words it.
	turnRE = regexp.MustCompile(`turn \d+`)
)

// shortenRule cuts a rule's text to n columns, keeping, as long as they fit, its comment (which names the
// Service in kube-proxy's rules) and its target (where the packet goes next); the matches between lose their
// middle first.
func shortenRule(s string, n int) string {
	if TextWidth(s) <= n {
		return s
	}
	cs, ce := -1, -1
	m := commentRE.FindStringSubmatchIndex(s)
	if m == nil {
		m = nftCommentRE.FindStringSubmatchIndex(s)
	}
	if m != nil {
		cs, ce = m[2], m[3]
	}
	ts := len(s)
	if m := targetRE.FindStringSubmatchIndex(s); m != nil {
		ts = m[2]
	}
	if cs < 0 || ce > ts {
		// No comment before the target: keep the target whole, cut what comes before it.
		tgt := s[ts:]
		if TextWidth(tgt)+8 > n {
			return ShortenMiddle(s, n)
		}
		return ShortenMiddle(s[:ts], n-TextWidth(tgt)) + tgt
	}
	pre, com, mid, tgt := s[:cs], s[cs:ce], s[ce:ts], s[ts:]
	room := n - TextWidth(com) - TextWidth(tgt)
	if room < 2 {
		// The comment and the target share what is left beside a "…" for each of the matches: the comment
		// at least half, the target cut at its end (KUBE-SEP-MQ4W…).
		rest := n - 2
		cw := min(TextWidth(com), max(rest/2, rest-TextWidth(tgt)))
		if rest-cw < 6 {
			return ShortenMiddle(s, n)
		}
		com, tgt = ShortenMiddle(com, cw), ShortenEnd(tgt, rest-cw)
		room = n - TextWidth(com) - TextWidth(tgt)
	}
	pw, mw := TextWidth(pre), TextWidth(mid)
	// Share the room between the matches before and after the comment, each at least its "…".
	pn := max(1, min(pw, room*pw/max(pw+mw, 1)))
	mn := max(1, min(mw, room-pn))
	if pw == 0 {
		pn = 0
	}
	if mw == 0 {
		mn = 0
	}
	return ShortenMiddle(pre, pn) + com + ShortenMiddle(mid, mn) + tgt
}

// compactResult says what a hop did in a few words: where a jump goes is in the rule's text; a rewrite says
// what it rewrote to ("dnat to 10.244.1.2:80"), a mark its change. -o wide has every change with FROM and TO.
func compactResult(h trace.Hop) string {
	if !h.Matched {
		if h.Probability > 0 {
			return "random: not this one"
		}
		return "no: " + compactReason(h.Reason)
	}
	r := h.Verdict
	if h.Table == "ipvs" && h.Reason != "" && r == "" {
		// The virtual server's lookup: "IPVS virtual server for 172.18.0.2:30080 (one per address …)".
		found, _, _ := strings.Cut(h.Reason, " (")
		return found
	}
	if h.Table == "ipvs" && h.Reason != "" {
		// A scheduler's choice is not a random rule: name the scheduler, and the turn where the node tells it.
		scheduler, _, _ := strings.Cut(h.Reason, ":")
		if m := turnRE.FindStringSubmatch(h.Reason); m != nil {
			scheduler += ", " + m[0]
		}
		return scheduler + ": " + r
	}
	switch verb(r) {
	case "continue":
		var marks []string
		for _, c := range h.Changes {
			if strings.HasPrefix(c, "mark ") {
				marks = append(marks, shortField(c))
			}
		}
		if len(marks) > 0 {
			r = strings.Join(marks, ", ")
		}
	case "jump", "goto":
		// An iptables rule names its target after -j/-g; an nft verdict map's target is not in the text.
		if target := strings.TrimPrefix(r, verb(r)+" "); strings.HasSuffix(h.Text, " "+target) {
			r = verb(r)
		}
	}
	if h.Probability > 0 {
		r = percent(h.Probability) + ": " + r
		if h.Choice == trace.ChoiceMaglev {
			r = "Maglev share " + r
		}
	}
	return r
}

func verb(verdict string) string {
	v, _, _ := strings.Cut(verdict, " ")
	return v
}

// shortField turns "destination 172.18.0.3:31473 -> 10.244.1.2:80" into "dst 172.18.0.3:31473 → 10.244.1.2:80".
func shortField(change string) string {
	for long, short := range map[string]string{"destination ": "dst ", "source ": "src "} {
		if strings.HasPrefix(change, long) {
			change = short + strings.TrimPrefix(change, long)
			break
		}
	}
	return strings.Replace(change, " -> ", " → ", 1)
}

// compactReason keeps a miss's first clause, and of "X (rule wants Y)" only what the rule wants: the packet's
// own value is in the Packet line.
func compactReason(r string) string {
	r, _, _ = strings.Cut(r, "; ")
	if i := strings.Index(r, " is not in "); i >= 0 {
		r, _, _ = strings.Cut(r[i+len(" is not in "):], " (")
		return "not in " + r
	}
	r, _, _ = strings.Cut(r, ": ")
	if i := strings.LastIndex(r, "(rule wants "); i >= 0 && strings.HasSuffix(r, ")") {
		return "wants " + strings.TrimSpace(r[i+len("(rule wants "):len(r)-1])
	}
	return r
}
