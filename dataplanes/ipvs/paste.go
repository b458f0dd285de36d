package ipvs

import (
	"fmt"
	"net/netip"
	"strings"
	"unicode/utf8"
)

// A pasted dump may hold several commands' outputs, each after a line "$ COMMAND" naming the command as the
// paste showed it (the paste front end writes it). The IPVS engine reads the outputs of ipvsadm: its listing
// (-L, -Ln) and its connection entries (-Lnc), and leaves every other command's output to the engines that read
// it.

// section is one command's output in a paste.
type section struct {
	command string // "ipvsadm -L -n"; "" where the paste does not name it
	text    string
}

// sections splits a paste at its "$ COMMAND" lines. Each section's text is a slice of raw (its lines are
// contiguous there): every engine is shown every dump, and a copy of an 8 MB iptables-save dump to find no
// ipvsadm output in it cost as much as reading the dump.
func sections(raw string) []section {
	var out []section
	cur := section{}
	start := 0 // where cur's text starts in raw
	flush := func(end int) {
		cur.text = raw[start:end]
		if cur.command != "" || strings.TrimSpace(cur.text) != "" {
			out = append(out, cur)
		}
	}
	for at := 0; at < len(raw); {
		l := raw[at:]
		if i := strings.IndexByte(l, '\n'); i >= 0 {
			l = l[:i+1]
		}
		if cmd, ok := strings.CutPrefix(l, "$ "); ok {
			flush(at)
			cur = section{command: strings.TrimSpace(cmd)}
			start = at + len(l)
		}
		at += len(l)
	}
	flush(len(raw))
	return out
}

// endsWithPrompt says whether raw ends with an empty prompt, the paste front end's mark of an output it shows
// whole (sections leaves the empty section after it out).
func endsWithPrompt(raw string) bool {
	raw = strings.TrimRight(raw, " \n")
	return raw == "$" || strings.HasSuffix(raw, "\n$")
}

// ipvsadmCommand reads a command line: whether it runs ipvsadm, and with which of the options that change what it
// prints. The command is as the paste showed it: "sudo ipvsadm -L -n", "ipvsadm -ln", "ipvsadm --list --numeric".
type ipvsadmCommand struct {
	ipvsadm  bool
	label    string // the command without sudo, for the read-as note
	numeric  bool   // -n: addresses and ports as numbers
	conns    bool   // -c: connection entries
	counters bool   // --stats, --rate, --thresholds, --persistent-conn: counters in place of schedulers
	save     bool   // -S: the save format, not a listing
}

func readCommand(line string) ipvsadmCommand {
	f := strings.Fields(line)
	for len(f) > 0 && f[0] == "sudo" {
		f = f[1:]
	}
	var c ipvsadmCommand
	if len(f) == 0 || (f[0] != "ipvsadm" && !strings.HasSuffix(f[0], "/ipvsadm")) {
		return c
	}
	c.ipvsadm, c.label = true, strings.Join(f, " ")
	for _, a := range f[1:] {
		switch {
		case strings.HasPrefix(a, "--"):
			switch a {
			case "--numeric":
				c.numeric = true
			case "--connection":
				c.conns = true
			case "--stats", "--rate", "--thresholds", "--persistent-conn":
				c.counters = true
			case "--save":
				c.save = true
			}
		case strings.HasPrefix(a, "-"):
			// Short options combine: -Ln, -lnc, -Sn.
			for _, o := range a[1:] {
				switch o {
				case 'n':
					c.numeric = true
				case 'c':
					c.conns = true
				case 'S':
					c.save = true
				}
			}
		}
	}
	return c
}

// ReadPaste reads the ipvsadm outputs in a paste into a table: the first listing's virtual servers, and the
// connection entries of `ipvsadm -Lnc`. ok is false when the paste holds no ipvsadm output; readAs says how each
// output was read.
func ReadPaste(raw string) (st *State, readAs []string, ok bool, err error) {
	st = &State{FromPaste: true}
	listings := 0
	secs := sections(raw)
	for i, sec := range secs {
		cmd := readCommand(sec.command)
		body := strings.TrimSpace(sec.text)
		conns := strings.HasPrefix(body, "IPVS connection entries")
		switch {
		case sec.command != "" && !cmd.ipvsadm:
			continue // another tool's output
		case !cmd.ipvsadm && !conns && !IsList(sec.text):
			continue // text no command names, and not ipvsadm's
		}
		ok = true
		label := cmd.label
		if !utf8.ValidString(sec.text) {
			return nil, nil, true, fmt.Errorf("%s: the output is not text (invalid UTF-8): was the paste damaged?", strings.TrimSpace(label+" output"))
		}
		switch {
		case cmd.save:
			return nil, nil, true, fmt.Errorf("%s: the save format is not read; paste `ipvsadm -Ln`", label)
		case conns || cmd.conns:
			if label == "" {
				label = "ipvsadm -Lnc"
			}
			c, err := ParseConnections(sec.text)
			if err != nil {
				if !cmd.numeric && cmd.ipvsadm {
					err = fmt.Errorf("%v (without -n ipvsadm prints names, not addresses; paste `ipvsadm -Lnc`)", err)
				}
				return nil, nil, true, fmt.Errorf("%s: %v", label, err)
			}
			st.Connections = append(st.Connections, c...)
			readAs = append(readAs, fmt.Sprintf("%s (%d connection entries)", label, len(c)))
			continue
		}
		named := label == ""
		if named {
			label = "ipvsadm -Ln"
		}
		if listings++; listings > 1 {
			readAs = append(readAs, fmt.Sprintf("%s (not read: a second listing in one paste; the first one is used)", label))
			continue
		}
		l, err := ParseList(sec.text)
		if err != nil {
			return nil, nil, true, fmt.Errorf("%s: %v", label, err)
		}
		st.Services = l.Services
		// The next prompt (or another output) after the listing shows it whole; without one it may have been cut.
		st.Cut = i == len(secs)-1 && len(st.Services) > 0 && !endsWithPrompt(raw)
		readAs = append(readAs, listingReadAs(label, named, l))
		if st.Cut {
			readAs[len(readAs)-1] += " (it ends with the paste: taken as whole)"
		}
	}
	if !ok {
		return nil, nil, false, nil
	}
	if listings == 0 {
		return nil, nil, true, fmt.Errorf("the paste holds ipvsadm's connection entries but not its listing of virtual servers; paste `ipvsadm -Ln` too")
	}
	return st, readAs, true, nil
}

// listingReadAs says how a listing was read: with names where ipvsadm printed them. A listing the paste does
// not name the command of is ipvsadm -L's when it has names, else taken for -Ln's.
func listingReadAs(label string, guessed bool, l *State) string {
	hosts, ports := false, false
	for _, v := range l.Services {
		hosts = hosts || v.NoAddress
		ports = ports || v.As != "" && !v.NoAddress
		for _, r := range v.RealServers {
			hosts = hosts || r.NoAddress
			ports = ports || r.As != "" && !r.NoAddress
		}
	}
	if guessed && (hosts || ports) {
		label = "ipvsadm -L"
	}
	switch {
	case hosts:
		return fmt.Sprintf("%s (names, not addresses: %d virtual servers)", label, len(l.Services))
	case ports:
		return fmt.Sprintf("%s (ports as service names: %d virtual servers)", label, len(l.Services))
	}
	return fmt.Sprintf("%s (%d virtual servers)", label, len(l.Services))
}

// LocalAddresses are the addresses of the virtual servers: kube-proxy binds every ClusterIP and external IP it
// serves on its dummy interface kube-ipvs0, so that a packet to one is for the node and reaches IPVS in INPUT;
// a NodePort's virtual servers are on the node's own addresses. 0.0.0.0 (a NodePort on every address, in some
// proxies) is not an address, and a server printed by name has none to give.
func (s *State) LocalAddresses() []netip.Addr {
	var out []netip.Addr
	seen := map[netip.Addr]bool{}
	for _, v := range s.Services {
		a := v.Address
		if v.FWMark != 0 || !a.IsValid() || a.IsUnspecified() || seen[a] {
			continue
		}
		seen[a] = true
		out = append(out, a)
	}
	return out
}
