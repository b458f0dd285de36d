package trace

import "testing"

// TestPercentNeverRoundsToZeroOrCertain: one path of 2³⁰ read "0.00%", and the chance a walk stopped at its
// bounds did not explore read "100.00%" though part of it was (issue 36).
func TestPercentNeverRoundsToZeroOrCertain(t *testing.T) {
	for p, want := range map[float64]string{
		0: "0.00%", 1: "100.00%", 1.0 / 3: "33.33%", 0.5: "50.00%",
		1.0 / (1 << 30):    "0.00000009%",
		1 - 3526.0/(1<<30): "99.99967%",
		0.00004:            "0.0040%",
		1e-20:              "<0.000000000001%",
		1 - 1e-15:          ">99.999999999999%",
		0.333333333488:     "33.33%",
	} {
		if got := Percent(p); got != want {
			t.Errorf("Percent(%v) = %s, want %s", p, got, want)
		}
	}
}
