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

// A save line's target, read with its words when it is parsed, is the one its words name (Rule.target of a
// rule split into Args), and its Args are its words after `-A CHAIN` or `-I CHAIN N`.
func TestTargetReadWithWords(t *testing.T) {
	for _, c := range []struct{ line, target string }{
		{`-A X -j Y`, "Y"},
		{`-A X -m comment --comment "a -j B" -j C`, "C"},
		{`-A X -m comment --comment a\ -j\ B -g C`, "C"},
		{`-I X 2 -j Y`, "Y"},
		{`-I X -j Y`, "Y"},
		{`-I X 2 -p tcp`, ""},
		{`-A X -j`, ""},
		{`-A X -p tcp --goto "Q R"`, "Q R"},
		{`-A X -j -j Z`, "-j"},
		{`-A X --jump Y\"Z --to-destination 1.2.3.4`, `Y"Z`},
		{`-A -j Y`, ""}, // chain "-j": its rule has no target
	} {
		r, err := ParseSave("*nat\n" + c.line + "\nCOMMIT\n")
		if err != nil {
			t.Fatalf("%s: %v", c.line, err)
		}
		var rule *Rule
		for _, ch := range r.Tables["nat"].Chains {
			if len(ch.Rules) > 0 {
				rule = ch.Rules[0]
			}
		}
		words, _ := Split(c.line)
		skip := 2
		if words[0] == "-I" && len(words) > 2 && words[2] == "2" {
			skip = 3
		}
		if got := rule.target(); got != c.target || got != target(words[skip:]) {
			t.Errorf("%s: target %q, want %q", c.line, got, c.target)
		}
		if got := rule.Args(); !reflect.DeepEqual(got, words[skip:]) {
			t.Errorf("%s: Args %q, want %q", c.line, got, words[skip:])
		}
	}
}
