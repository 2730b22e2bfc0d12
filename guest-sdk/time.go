package wasmkeep

import "time"

// Now returns the host's clock, the one alarms are due by. In a guest (under
// wasip1) it is time.Now, which the host sets to its own clock. In a native
// test with a fake host installed (package wasmkeeptest) it is the fake's
// clock, which the test moves; time.Now there is the machine's. Handlers
// that read the time with Now rather than time.Now can be tested with the
// fake's clock.
func Now() time.Time { return hostNow() }

// maxAlarmMillis is the latest alarm time the host accepts, in Unix
// milliseconds (abi.MaxAlarmMillis; the SDK has no dependencies, so it keeps
// its own copy).
const maxAlarmMillis int64 = 999_999_999_999_999

// toMillis converts t to Unix milliseconds, rounding up to the next whole
// millisecond so that an alarm never fires before t. A time too far from 1970
// for int64 milliseconds becomes -1 or maxAlarmMillis+1, which the host
// refuses with EINVAL like any other time out of range.
func toMillis(t time.Time) int64 {
	sec := t.Unix()
	switch {
	case sec < -(maxAlarmMillis/1000 + 1):
		return -1
	case sec > maxAlarmMillis/1000+1:
		return maxAlarmMillis + 1
	}
	return sec*1000 + (int64(t.Nanosecond())+999_999)/1_000_000
}

// fromMillis converts Unix milliseconds from the host to a time in UTC.
func fromMillis(ms int64) time.Time {
	return time.UnixMilli(ms).UTC()
}
