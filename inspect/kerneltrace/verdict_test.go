package kerneltrace

import "testing"

// TestXtablesVerdictNames: xtables-monitor prints a RETURN as the number nf_tables uses (captured with iptables
// 1.8.9 in a namespace: a chain T1 whose rule returns); the event names it, as the walk does.
func TestXtablesVerdictNames(t *testing.T) {
	line := " TRACE: 2 7da53f65 filter:T1:rule:0x2:0xfffffffb  -4 -t filter -A T1 -p tcp -j RETURN"
	m := xtTrace.FindStringSubmatch(line)
	if m == nil || xtVerdictName(m[5]) != "RETURN" {
		t.Fatalf("%q: match %q", line, m)
	}
	for raw, want := range map[string]string{"0xffffffff": "CONTINUE", "0xfffffffd": "JUMP", "ACCEPT": "ACCEPT", "0x1": "0x1", "JUMP": "JUMP"} {
		if got := xtVerdictName(raw); got != want {
			t.Errorf("xtVerdictName(%q) = %q, want %q", raw, got, want)
		}
	}
}
