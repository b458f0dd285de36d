package trace

import (
	"strings"
	"testing"
)

// trace --dst NODE:0 walked the rules and named an unrelated ClusterIP Service: port 0 is bad input.
func TestParseDstRefusesPortZero(t *testing.T) {
	for _, s := range []string{"172.18.0.3:0", "10.96.0.1:0", "172.18.0.3:00"} {
		_, err := ParseDst(s)
		if err == nil || !strings.Contains(err.Error(), "port 0") || strings.Contains(err.Error(), "\n") {
			t.Errorf("ParseDst(%q) = %v, want one line refusing port 0", s, err)
		}
	}
	for _, s := range []string{"172.18.0.3:1", "172.18.0.3:30080", "172.18.0.3:65535"} {
		if _, err := ParseDst(s); err != nil {
			t.Errorf("ParseDst(%q) = %v", s, err)
		}
	}
	for _, s := range []string{"172.18.0.3:65536", "172.18.0.3:-1", "172.18.0.3", "[::1]:80", "node:80", ""} {
		if _, err := ParseDst(s); err == nil {
			t.Errorf("ParseDst(%q) accepted", s)
		}
	}
	if _, err := (Packet{Dst: "172.18.0.3:0", Src: "172.18.0.1"}).ParseFlow(); err == nil {
		t.Errorf("ParseFlow of a packet to port 0 accepted")
	}
}
