package sweeper

import (
	"testing"
	"time"
)

// Keeps is true exactly when an offer of an overdue time would be refused,
// so a sweep that leaves kept actors out of its cap loses no offer that
// would have changed the timer.
func TestTimerKeepsMatchesOffer(t *testing.T) {
	const now = 1_000_000
	horizon := 5 * time.Minute
	h := horizon.Milliseconds()
	cases := []struct {
		name string
		held int64 // 0: nothing held
		want bool
	}{
		{"nothing held", 0, false},
		{"held long overdue", now - 60_000, true},
		{"held due now", now, true},
		{"a retry within the horizon", now + 10_000, true},
		{"a retry at the horizon's edge", now + h, true},
		{"a time past the horizon", now + h + 1, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tm := NewTimer(horizon)
			if c.held != 0 {
				tm.Set("a", c.held)
			}
			if got := tm.Keeps("a", now); got != c.want {
				t.Fatalf("Keeps = %v, want %v", got, c.want)
			}
			// An overdue offer (a sweep's) is refused exactly when kept.
			for _, overdue := range []int64{now - 120_000, now - 1} {
				probe := NewTimer(horizon)
				if c.held != 0 {
					probe.Set("a", c.held)
				}
				if taken := probe.Offer("a", overdue, now); taken == c.want {
					t.Fatalf("Offer(%d) taken = %v with Keeps = %v", overdue, taken, c.want)
				}
			}
		})
	}
}
