package dataplanes

import (
	"encoding/json"
	"unicode/utf8"
)

// JSONString is s as a JSON string (quotes included), in one buffer of its exact size: a pasted dump travels in
// its engine's Part as JSON text, and encoding/json grows its buffer a quarter at a time, which for an 8 MB
// dump allocated 50 MB. The result decodes to s as encoding/json's does (it leaves <, > and & as they are,
// which is JSON too); text that is not UTF-8 is left to encoding/json, which replaces what is invalid.
func JSONString(s string) ([]byte, error) {
	if !utf8.ValidString(s) {
		return json.Marshal(s)
	}
	n := 2
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
			n += 2
		case c < 0x20:
			n += 6 // \u00XX
		default:
			n++
		}
	}
	const hex = "0123456789abcdef"
	out := make([]byte, 0, n)
	out = append(out, '"')
	start := 0 // s[start:i] is copied as it is
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
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
			out = append(out, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	out = append(out, s[start:]...)
	return append(out, '"'), nil
}
