package iptables

import (
	"reflect"
	"testing"
)

// Split follows iptables-restore's tokenizer: double quotes group, a backslash escapes the next character.
func TestSplit(t *testing.T) {
	for _, c := range []struct {
		line string
		want []string
	}{
		{`-A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -j KUBE-SVC-X`, []string{"-A", "KUBE-SERVICES", "-d", "10.96.0.1/32", "-p", "tcp", "-j", "KUBE-SVC-X"}},
		{`-m comment --comment "default/web cluster IP" -j X`, []string{"-m", "comment", "--comment", "default/web cluster IP", "-j", "X"}},
		{"  a\t\tb  ", []string{"a", "b"}},
		{`--comment ""`, []string{"--comment", ""}},
		{`a"b c"d`, []string{"ab cd"}},
		{`--comment "say \"hi\"" x`, []string{"--comment", `say "hi"`, "x"}},
		{`a\ b c`, []string{"a b", "c"}},
		{`ends\`, []string{`ends\`}},
		{``, []string{}},
	} {
		got, err := Split(c.line)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("Split(%q) = %q, %v; want %q", c.line, got, err, c.want)
		}
	}
	if _, err := Split(`--comment "open`); err == nil {
		t.Error("an unterminated quote is not an error")
	}
}
