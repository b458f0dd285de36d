package nodeimage

import (
	"strings"
	"testing"
)

// The Debian archive and its security archive, from this machine's apt sources or deb.debian.org: the Cilium
// tree's bpftool comes from the second.
func TestMirrors(t *testing.T) {
	m := aptMirror()
	if !strings.HasSuffix(m, "/debian") {
		t.Errorf("aptMirror() = %q, want a URL ending in /debian", m)
	}
	if s := securityMirror(m); !strings.HasSuffix(s, "/debian-security") {
		t.Errorf("securityMirror(%q) = %q, want a URL ending in /debian-security", m, s)
	}
	if got := aptSource("no-such-archive"); got != "" {
		t.Errorf("aptSource(no-such-archive) = %q", got)
	}
}
