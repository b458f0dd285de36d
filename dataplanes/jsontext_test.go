package dataplanes

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// AppendJSONString must write what decodes to its input as encoding/json's encoding does.
func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "plain", `-A X -m comment --comment "a \"b\" \\c" -j Y`, "tab\there\r\nnew\x00\x1f\x7f",
		"ünïcödé \u2028 <&>", "\xff\xfe invalid", "-A KUBE-SVC-X -j KUBE-SEP-Y\n-A KUBE-SEP-Y -j DNAT\n"} {
		buf, err := AppendJSONString([]byte("x="), s, 1)
		if err != nil || string(buf[:2]) != "x=" {
			t.Fatalf("AppendJSONString(%q) = %q, %v", s, buf, err)
		}
		got := buf[2:]
		var back, want string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("AppendJSONString(%q) = %s: %v", s, got, err)
		}
		std, _ := json.Marshal(s)
		json.Unmarshal(std, &want)
		if back != want {
			t.Errorf("AppendJSONString(%q) decodes to %q; encoding/json's to %q", s, back, want)
		}
		// One buffer of the exact size, for text whose only control character is the newline (a dump's).
		plain := !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 && r != '\n' })
		if cap(buf) != len(buf)+1 && utf8.ValidString(s) && plain {
			t.Errorf("AppendJSONString(%q): %d bytes and 1 more in a buffer of %d", s, len(buf), cap(buf))
		}
	}
}
