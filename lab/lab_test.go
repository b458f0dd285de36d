package lab

import "testing"

func TestCount(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{{0, "0 replicas"}, {1, "1 replica"}, {2, "2 replicas"}, {-1, "-1 replicas"}} {
		if got := Count(tc.n, "replica"); got != tc.want {
			t.Errorf("Count(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
	if got := Count(int32(1), "connection"); got != "1 connection" {
		t.Errorf("int32: %q", got)
	}
}
