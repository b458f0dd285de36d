package render

import (
	"fmt"
	"reflect"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Visible is s with every control character (C0, DEL, C1) and every byte that is not UTF-8 written as its Go
// escape (\x1b, \n, \u009b), so that text from the input (a pasted dump's comments and rule text, names)
// shows as what it is on a terminal instead of acting on it: an escape sequence in a comment recoloured, moved
// or cleared the screen (issue 36), a newline in a name split a line of a table.
func Visible(s string) string {
	clean := true
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			clean = false
			break
		}
		i += n
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x80 && unicode.IsControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r) || r == '\u2028' || r == '\u2029': // the last two: line breaks to some terminals
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// visible is a deep copy of *v with every string made Visible: what the views print from a trace (or a
// comparison, or stages) in one place, before any width is measured, so the tables stay aligned. Unexported
// fields are copied as they are (the views print none of them).
func visible[T any](v *T) *T {
	if v == nil {
		return nil
	}
	out := new(T)
	copyVisible(reflect.ValueOf(out).Elem(), reflect.ValueOf(v).Elem())
	return out
}

func copyVisible(dst, src reflect.Value) {
	switch src.Kind() {
	case reflect.String:
		dst.SetString(Visible(src.String()))
	case reflect.Pointer:
		if src.IsNil() {
			return
		}
		p := reflect.New(src.Type().Elem())
		copyVisible(p.Elem(), src.Elem())
		dst.Set(p)
	case reflect.Slice:
		if src.IsNil() {
			return
		}
		s := reflect.MakeSlice(src.Type(), src.Len(), src.Len())
		for i := range src.Len() {
			copyVisible(s.Index(i), src.Index(i))
		}
		dst.Set(s)
	case reflect.Array:
		for i := range src.Len() {
			copyVisible(dst.Index(i), src.Index(i))
		}
	case reflect.Map:
		if src.IsNil() {
			return
		}
		m := reflect.MakeMapWithSize(src.Type(), src.Len())
		for it := src.MapRange(); it.Next(); {
			k := reflect.New(src.Type().Key()).Elem()
			copyVisible(k, it.Key())
			v := reflect.New(src.Type().Elem()).Elem()
			copyVisible(v, it.Value())
			m.SetMapIndex(k, v)
		}
		dst.Set(m)
	case reflect.Struct:
		dst.Set(src) // unexported fields as they are
		for i := range src.NumField() {
			if dst.Field(i).CanSet() {
				copyVisible(dst.Field(i), src.Field(i))
			}
		}
	case reflect.Interface:
		if src.IsNil() {
			return
		}
		v := reflect.New(src.Elem().Type()).Elem()
		copyVisible(v, src.Elem())
		dst.Set(v)
	default:
		dst.Set(src)
	}
}
