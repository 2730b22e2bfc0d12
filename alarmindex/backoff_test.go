package alarmindex

import (
	"testing"
	"time"
)

func TestRetryDelayDoublesToFiveMinutes(t *testing.T) {
	cases := []struct {
		failures int
		want     time.Duration
	}{
		{-1, time.Second},
		{0, time.Second},
		{1, time.Second},
		{2, 2 * time.Second},
		{3, 4 * time.Second},
		{9, 256 * time.Second},
		{10, 5 * time.Minute},
		{11, 5 * time.Minute},
		{1 << 30, 5 * time.Minute},
	}
	for _, c := range cases {
		if got := RetryDelay(c.failures, DefaultRetryBase, DefaultRetryMax); got != c.want {
			t.Errorf("RetryDelay(%d) = %v, want %v", c.failures, got, c.want)
		}
	}
	if got := RetryDelay(1, time.Hour, time.Minute); got != time.Minute {
		t.Errorf("base above max: %v, want the max", got)
	}
}

func TestAfterFailure(t *testing.T) {
	p := func(v int64) *int64 { return &v }
	const retryAt = 10_000
	cases := []struct {
		name string
		left *int64
		want *int64
	}{
		{"a clear stands", nil, nil},
		{"the same alarm moves to the retry time", p(5_000), p(retryAt)},
		{"one set for now moves to the retry time", p(9_999), p(retryAt)},
		{"one set for the retry time stands", p(retryAt), p(retryAt)},
		{"one set later stands", p(60_000), p(60_000)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := AfterFailure(c.left, retryAt)
			if (got == nil) != (c.want == nil) || (got != nil && *got != *c.want) {
				t.Fatalf("AfterFailure = %v, want %v", deref(got), deref(c.want))
			}
			if got != nil && got == c.left {
				t.Fatal("result aliases the handler's alarm")
			}
		})
	}
	if got := AfterFailure(p(MaxDueMs-1), MaxDueMs+5); *got != MaxDueMs {
		t.Errorf("retry past the last indexable time: %d, want %d", *got, int64(MaxDueMs))
	}
}

func deref(p *int64) any {
	if p == nil {
		return "none"
	}
	return *p
}

func TestGiveUpAfterMaxAttempts(t *testing.T) {
	for _, c := range []struct {
		failures, max int
		want          bool
	}{
		{1, 0, false}, {1000, 0, false}, {5, -1, false},
		{1, 1, true}, {1, 3, false}, {2, 3, false}, {3, 3, true}, {4, 3, true},
	} {
		if got := GiveUp(c.failures, c.max); got != c.want {
			t.Errorf("GiveUp(%d failures, max %d) = %v, want %v", c.failures, c.max, got, c.want)
		}
	}
}

func TestAfterLastFailure(t *testing.T) {
	p := func(v int64) *int64 { return &v }
	const retryAt = 10_000
	cases := []struct {
		name string
		left *int64
		want *int64
	}{
		{"a clear stands", nil, nil},
		{"the failed alarm is cleared", p(5_000), nil},
		{"one set for now is cleared", p(9_999), nil},
		{"one set for the retry time stands", p(retryAt), p(retryAt)},
		{"one set later stands", p(60_000), p(60_000)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := AfterLastFailure(c.left, retryAt)
			if (got == nil) != (c.want == nil) || (got != nil && *got != *c.want) {
				t.Fatalf("AfterLastFailure = %v, want %v", deref(got), deref(c.want))
			}
			if got != nil && got == c.left {
				t.Fatal("result aliases the handler's alarm")
			}
		})
	}
}

func TestAfterFailureLimitedAt(t *testing.T) {
	var r Rules
	at := int64(1_000_000)
	next, gaveUp := r.AfterFailureLimitedAt(&at, 2, at, 3)
	if gaveUp || next == nil || *next != at+2000 {
		t.Fatalf("second failure of three: %v, gave up %v; want a retry at +2 s", deref(next), gaveUp)
	}
	next, gaveUp = r.AfterFailureLimitedAt(&at, 3, at, 3)
	if !gaveUp || next != nil {
		t.Fatalf("third failure of three: %v, gave up %v; want cleared and given up", deref(next), gaveUp)
	}
	later := at + time.Hour.Milliseconds()
	next, gaveUp = r.AfterFailureLimitedAt(&later, 3, at, 3)
	if !gaveUp || next == nil || *next != later {
		t.Fatalf("third failure of three, the handler set a later alarm: %v, gave up %v; want it to stand", deref(next), gaveUp)
	}
	next, gaveUp = r.AfterFailureLimitedAt(&at, 50, at, 0)
	if gaveUp || next == nil || *next != at+DefaultRetryMax.Milliseconds() {
		t.Fatalf("no limit: %v, gave up %v; want a retry at retry_max", deref(next), gaveUp)
	}
}
