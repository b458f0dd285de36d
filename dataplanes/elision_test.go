package dataplanes

import "testing"

func TestElision(t *testing.T) {
	for line, want := range map[string]bool{
		"...": true, "  ……": true, "[...]": true, "(...)": true, "<snip>": true, "(snipped)": true, "and more.....": true,
		"And so on...": true, "etc.": true, "(truncated)": true,
		"-A KUBE-SERVICES -j KUBE-NODEPORTS": false, "Chain X (1 references)": false, "": false, "..foo": false,
	} {
		if got := Elision(line); got != want {
			t.Errorf("Elision(%q) = %v, want %v", line, got, want)
		}
	}
}
