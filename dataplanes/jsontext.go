package dataplanes

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// AppendJSONString appends s to dst as a JSON string (quotes included), making room once for it and for extra
// bytes more (what the caller writes after it): a pasted dump travels in its engine's Part as JSON text, and
// encoding/json grows its buffer a quarter at a time, which for an 8 MB dump allocated 50 MB. The result
// decodes to s as encoding/json's does (it leaves <, > and & as they are, which is JSON too); text that is not
// UTF-8 is left to encoding/json, which replaces what is invalid.
func AppendJSONString(dst []byte, s string, extra int) ([]byte, error) {
	if !utf8.ValidString(s) {
		q, err := json.Marshal(s)
		return append(dst, q...), err
	}
	// The size, when no byte but these three needs escaping (a dump's tabs and other control characters
	// are few, and append makes room for them): counted by strings.Count, which reads many bytes at a time.
	n := len(s) + 2 + strings.Count(s, "\"") + strings.Count(s, "\\") + strings.Count(s, "\n")
	out := dst
	if cap(dst)-len(dst) < n+extra {
		out = make([]byte, len(dst), len(dst)+n+extra)
		copy(out, dst)
	}
	out = append(out, '"')
	start := 0 // s[start:i] is copied as it is
	for i := 0; i < len(s); i++ {
		c := s[i]
		if escapeExtra[c] == 0 {
			continue
		}
		out = append(out, s[start:i]...)
		switch c {
		case '"', '\\':
			out = append(out, '\\', c)
		case '\n':
			out = append(out, '\\', 'n')
		case '\r':
			out = append(out, '\\', 'r')
		case '\t':
			out = append(out, '\\', 't')
		default:
			out = append(out, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	out = append(out, s[start:]...)
	return append(out, '"'), nil
}

const hexDigits = "0123456789abcdef"

// escapeExtra is how many bytes more than one a byte takes in a JSON string: 1 for those escaped by a letter
// (\" \\ \n \r \t), 5 for other control characters (\u00XX), 0 for the rest: a table, which an 8 MB dump is
// read through.
var escapeExtra = func() (t [256]uint8) {
	for c := 0; c < 0x20; c++ {
		t[c] = 5
	}
	for _, c := range []byte{'"', '\\', '\n', '\r', '\t'} {
		t[c] = 1
	}
	return t
}()
