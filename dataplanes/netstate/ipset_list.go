package netstate

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// `ipset list` prints each set as a block of "Key: value" header lines, then "Members:" and one entry per line,
// with a blank line between sets:
//
//	Name: KUBE-CLUSTER-IP
//	Type: hash:ip,port
//	Revision: 5
//	Header: family inet hashsize 1024 maxelem 65536
//	Size in memory: 8696
//	References: 2
//	Number of entries: 143
//	Members:
//	10.68.135.246,tcp:39080
//
// `ipset list -t` (terse) prints the headers only. "Number of entries" is printed by ipset 6.24 and later; older
// listings do not say how many members a set has. A pasted listing is often cut (a chat window, an issue
// excerpt): a set whose listing shows fewer members than it has is marked Incomplete, so that a member not
// found in it is unknown, not absent.

// IsIPSetList says whether text looks like `ipset list` output: its first line that is not blank or a
// "$ COMMAND" line names a set, and the next is its "Type:".
func IsIPSetList(text string) bool {
	// Line by line, without a slice of them all: every output of a paste is asked, an 8 MB dump's too.
	named := false // the first line that counts named a set: the next that is not blank must be its type
	for l := range strings.SplitSeq(text, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case named && l == "":
			continue // blank lines aside, which ParseIPSetList passes over
		case named:
			return strings.HasPrefix(l, "Type:")
		case l == "" || strings.HasPrefix(l, "$ "):
			continue
		case !strings.HasPrefix(l, "Name:"):
			return false
		}
		named = true
	}
	return false
}

// IsIPSetSave says whether text looks like `ipset save` output (create and add lines), which ParseIPSetSave
// reads.
func IsIPSetSave(text string) bool {
	for l := range strings.SplitSeq(text, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] == "$" {
			continue
		}
		return f[0] == "create" && len(f) >= 3 && strings.Contains(f[2], ":")
	}
	return false
}

// ParseIPSetList reads `ipset list` (or `ipset list -t`) output into sets whose members are written as `ipset
// save` writes them, the form Match reads. A set whose member list is not whole in the text is marked
// Incomplete, saying why.
func ParseIPSetList(text string) ([]IPSet, error) {
	var sets []IPSet
	type block struct {
		count   int  // "Number of entries", -1 when not printed
		members bool // the "Members:" line was read
	}
	var cur *block
	lines := strings.Split(text, "\n")
	// A text that does not end with a line break was cut inside its last line.
	cutMidLine := !strings.HasSuffix(text, "\n")
	if cutMidLine {
		// The last line is partial only if it holds something.
		cutMidLine = strings.TrimSpace(lines[len(lines)-1]) != ""
	}
	// ipset prints a blank line between sets, not after the last: blank lines at the end are the paste's,
	// and do not show that the last list ended.
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	finish := func(last bool) {
		if cur == nil {
			return
		}
		s := &sets[len(sets)-1]
		n := len(s.Members)
		switch {
		case cur.count >= 0 && n == cur.count:
		case cur.count >= 0 && !cur.members:
			s.Incomplete = fmt.Sprintf("the listing shows none of its %d members (ipset list -t?)", cur.count)
		case cur.count >= 0 && n > cur.count:
			s.Incomplete = fmt.Sprintf("the listing shows %d members but says the set has %d: it does not read as one listing", n, cur.count)
		case cur.count >= 0:
			if last && n > 0 && n < cur.count {
				// The paste ends inside this list: its last line may be a member cut short ("10.68.52.1" of
				// "10.68.52.155,tcp:48848"), which would match what the real member does not.
				s.Members = s.Members[:n-1]
			}
			s.Incomplete = fmt.Sprintf("the listing shows %d of its %d members: the paste was cut", len(s.Members), cur.count)
		case !cur.members:
			s.Incomplete = "the listing shows no members and does not say how many the set has (ipset list -t?)"
		case last:
			// Nothing after this list shows it ended, and the listing does not count members (ipset before 6.24).
			if cutMidLine && n > 0 {
				s.Members = s.Members[:n-1]
			}
			s.Incomplete = "the listing ends inside this set's members and does not say how many it has (no \"Number of entries:\" line): the paste may have been cut"
		}
		cur = nil
	}
	for i, raw := range lines {
		n := i + 1
		line := strings.TrimSpace(raw)
		if line == "" {
			if cur != nil && cur.members {
				finish(false)
			}
			continue
		}
		if name, ok := strings.CutPrefix(line, "Name:"); ok {
			finish(false)
			name = strings.TrimSpace(name)
			if name == "" || strings.ContainsAny(name, " \t") {
				return nil, fmt.Errorf("ipset list line %d: %q: want Name: SET", n, raw)
			}
			sets = append(sets, IPSet{Name: name})
			cur = &block{count: -1}
			continue
		}
		if cur == nil {
			if strings.HasPrefix(line, "$ ") && len(sets) == 0 {
				continue // the command the paste names
			}
			return nil, fmt.Errorf("ipset list line %d: %q: want Name: SET", n, raw)
		}
		s := &sets[len(sets)-1]
		if cur.members {
			// An entry, possibly followed by its options ("timeout 3600", "packets 0 bytes 0", `comment "…"`);
			// the entry itself is what Match reads. A "nomatch" entry excludes its net: it is kept with the
			// flag, which Match does not read as a member.
			f := strings.Fields(line)
			m := f[0]
			if slices.Contains(f[1:], "nomatch") {
				m += " nomatch"
			}
			s.Members = append(s.Members, m)
			continue
		}
		key, value, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("ipset list line %d: %q: want a \"Key: value\" header line or the Members line", n, raw)
		}
		value = strings.TrimSpace(value)
		if s.Type == "" && key != "Type" {
			// ipset prints a set's type right after its name.
			return nil, fmt.Errorf("ipset list line %d: %q: want Type: after Name: %s", n, raw, s.Name)
		}
		switch key {
		case "Type":
			if _, _, ok := strings.Cut(value, ":"); !ok || strings.ContainsAny(value, " \t") {
				return nil, fmt.Errorf("ipset list line %d: set type %q: want METHOD:DIMENSIONS (hash:ip,port)", n, value)
			}
			s.Type = value
		case "Header":
			s.Options = value
		case "Number of entries":
			c, err := strconv.Atoi(value)
			if err != nil || c < 0 {
				return nil, fmt.Errorf("ipset list line %d: number of entries %q", n, value)
			}
			cur.count = c
		case "Members":
			if value != "" {
				return nil, fmt.Errorf("ipset list line %d: %q: want Members: alone on its line", n, raw)
			}
			cur.members = true
		}
		// Revision, Size in memory, References and keys of later versions say nothing a match reads.
	}
	finish(true)
	for _, s := range sets {
		if s.Type == "" {
			return nil, fmt.Errorf("ipset list: set %s has no Type: line", s.Name)
		}
	}
	if len(sets) == 0 {
		return nil, fmt.Errorf("ipset list: no sets (want Name: SET lines)")
	}
	return sets, nil
}

// Complete says whether the set's member list is whole. A Match that finds no member in an incomplete set
// does not show the packet is outside it: the answer is unknown, for the reason in Incomplete.
func (set *IPSet) Complete() bool { return set.Incomplete == "" }
