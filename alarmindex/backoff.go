package alarmindex

import "time"

// Committed-retry defaults (docs/design.md#retries).
const (
	// DefaultRetryBase is the delay after the first failure in a row.
	DefaultRetryBase = time.Second
	// DefaultRetryMax caps the doubling: retry_max, the longest backoff. It
	// is also how long an entry the rules keep for an actor the bucket never
	// had waits before it is tried again.
	DefaultRetryMax = 5 * time.Minute
)

// RetryDelay is the delay before the attempt that follows the failures-th
// failure in a row: base for the first (failures <= 1 counts as the first),
// doubling with each further failure, capped at max. With the defaults:
// 1 s, 2 s, 4 s, ... 256 s, then 5 min.
func RetryDelay(failures int, base, max time.Duration) time.Duration {
	if base >= max {
		return max
	}
	d := base
	for i := 1; i < failures; i++ {
		if d > max/2 {
			return max
		}
		d *= 2
	}
	return d
}

// AfterFailure is the alarm committed after on-alarm failed: whatever the
// handler left due before retryAt (the same alarm, or one it set for now)
// moves to retryAt; one it set for retryAt or later, or a clear (nil),
// stands. retryAt is capped at MaxDueMs so the result can be indexed. The
// result never aliases handlerLeft.
func AfterFailure(handlerLeft *int64, retryAt int64) (newAlarm *int64) {
	if handlerLeft == nil {
		return nil
	}
	retryAt = min(retryAt, MaxDueMs)
	v := *handlerLeft
	if v < retryAt {
		v = retryAt
	}
	return &v
}

// AfterFailureAt is the alarm committed when on-alarm failed at nowMs for
// the failures-th time in a row and the handler left handlerLeft:
// AfterFailure(handlerLeft, nowMs + RetryDelay(failures, DefaultRetryBase,
// r.RetryMax)). The simulator commits retries with it, and holds each to
// the rule written out independently; the mutations RetryNotDoubled and
// RetryMovesLaterAlarm break it on purpose.
func (r Rules) AfterFailureAt(handlerLeft *int64, failures int, nowMs int64) *int64 {
	retryMax := r.RetryMax
	if retryMax <= 0 {
		retryMax = DefaultRetryMax
	}
	delay := RetryDelay(failures, DefaultRetryBase, retryMax)
	if r.variants.RetryNotDoubled {
		delay = DefaultRetryBase
	}
	retryAt := nowMs + delay.Milliseconds()
	if r.variants.RetryMovesLaterAlarm && handlerLeft != nil {
		// A later alarm the handler set is moved back to the retry time.
		return &retryAt
	}
	return AfterFailure(handlerLeft, retryAt)
}

// GiveUp reports whether a run of on-alarm that failed for the failures-th
// time in a row (the first run of the alarm included) was the last one a
// retry policy of maxAttempts allows. maxAttempts 0 (or less) is the
// design's default: no limit, the backoff goes on for ever.
func GiveUp(failures, maxAttempts int) bool {
	return maxAttempts > 0 && failures >= maxAttempts
}

// AfterLastFailure is the alarm committed when the last attempt a retry
// policy allows failed: the retry is given up, so an alarm the handler left
// due before retryAt (the failed alarm itself, or one it set for now) is
// cleared, while one it set for retryAt or later stands, as it would after
// any failure. The result never aliases handlerLeft.
func AfterLastFailure(handlerLeft *int64, retryAt int64) (newAlarm *int64) {
	if handlerLeft == nil || *handlerLeft < min(retryAt, MaxDueMs) {
		return nil
	}
	v := *handlerLeft
	return &v
}

// AfterFailureLimitedAt is AfterFailureAt under a retry policy of
// maxAttempts: when the failures-th failure in a row is the last the
// policy allows (GiveUp), it returns AfterLastFailure's alarm and gaveUp.
// The failure count committed with it is then 0.
func (r Rules) AfterFailureLimitedAt(handlerLeft *int64, failures int, nowMs int64, maxAttempts int) (newAlarm *int64, gaveUp bool) {
	if !GiveUp(failures, maxAttempts) {
		return r.AfterFailureAt(handlerLeft, failures, nowMs), false
	}
	retryMax := r.RetryMax
	if retryMax <= 0 {
		retryMax = DefaultRetryMax
	}
	return AfterLastFailure(handlerLeft, nowMs+RetryDelay(failures, DefaultRetryBase, retryMax).Milliseconds()), true
}
