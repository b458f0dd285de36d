package dataplanes

import (
	"regexp"
	"strings"
)

// elision is a line people put in a paste where they left lines out: "...", "…", "[...]", "<snip>",
// "(truncated)", "and more.....", "etc.".
var elision = regexp.MustCompile(`(?i)^(\.{3,}|…+|\[(\.{3,}|…)\]|\((\.{3,}|…)\)|<\s*snip(ped)?\s*>|\(snip(ped)?\)|\[snip(ped)?\]|\(truncated\)|\[truncated\]|and (so on|more)\s*(\.+|…)?|etc\.*|more\s*(\.{2,}|…))$`)

// Elision says whether a pasted line stands for lines the paste left out. Readers keep the place: a walk that
// reaches it cannot tell what the left-out rules did.
func Elision(line string) bool {
	t := strings.TrimSpace(line)
	// Their first bytes, checked before the expression: every line of a dump is asked.
	if t == "" || strings.IndexByte(".[(<aAeEmM\xe2", t[0]) < 0 || len(t) > 40 {
		return false
	}
	return elision.MatchString(t)
}
