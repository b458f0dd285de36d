package netns

import (
	"testing"
	"time"
)

func TestResyncPeriod(t *testing.T) {
	for _, c := range []struct {
		env  string
		want time.Duration
		ok   bool
	}{
		{"", syncPeriod, true},
		{"10m", 10 * time.Minute, true},
		{"1s", time.Second, true},
		{"500ms", 0, false}, // below kube-proxy's min sync period
		{"ten minutes", 0, false},
	} {
		t.Setenv(SyncPeriodEnv, c.env)
		got, err := ResyncPeriod()
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("%s=%q: %v, %v; want %v (ok %v)", SyncPeriodEnv, c.env, got, err, c.want, c.ok)
		}
	}
}
