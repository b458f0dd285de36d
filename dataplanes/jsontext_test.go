package dataplanes

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// JSONString must decode to its input as encoding/json's encoding does.
func TestJSONString(t *testing.T) {
	for _, s := range []string{"", "plain", `-A X -m comment --comment "a \"b\" \\c" -j Y`, "tab\there\r\nnew\x00\x1f\x7f",
		"ünïcödé \u2028 <&>", "\xff\xfe invalid", "-A KUBE-SVC-X -j KUBE-SEP-Y\n-A KUBE-SEP-Y -j DNAT\n"} {
		got, err := JSONString(s)
		if err != nil {
			t.Fatal(err)
		}
		var back, want string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("JSONString(%q) = %s: %v", s, got, err)
		}
		std, _ := json.Marshal(s)
		json.Unmarshal(std, &want)
		if back != want {
			t.Errorf("JSONString(%q) decodes to %q; encoding/json's to %q", s, back, want)
		}
		// One buffer of the exact size, for text whose only control character is the newline (a dump's).
		plain := !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 && r != '\n' })
		if cap(got) != len(got) && utf8.ValidString(s) && plain {
			t.Errorf("JSONString(%q): %d bytes in a buffer of %d", s, len(got), cap(got))
		}
	}
}
