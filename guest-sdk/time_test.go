//go:build !wasip1

package wasmkeep

import (
	"testing"
	"time"
)

func TestToMillis(t *testing.T) {
	tests := []struct {
		name string
		t    time.Time
		want int64
	}{
		{"epoch", time.Unix(0, 0), 0},
		{"whole ms", time.UnixMilli(1_700_000_000_123), 1_700_000_000_123},
		{"1ns after a ms rounds up", time.UnixMilli(5000).Add(time.Nanosecond), 5001},
		{"1ns before a ms rounds up to it", time.UnixMilli(5000).Add(-time.Nanosecond), 5000},
		{"latest time", time.UnixMilli(maxAlarmMillis), maxAlarmMillis},
		{"one past latest", time.UnixMilli(maxAlarmMillis + 1), maxAlarmMillis + 1},
		{"before 1970", time.UnixMilli(-1), -1},
		{"half a ms before 1970 rounds up to 0", time.Unix(0, -500_000), 0},
		{"zero Time", time.Time{}, -1},
		{"far past clamps", time.Date(-300_000_000, 1, 1, 0, 0, 0, 0, time.UTC), -1},
		{"far future clamps", time.Date(300_000_000, 1, 1, 0, 0, 0, 0, time.UTC), maxAlarmMillis + 1},
		{"time zone does not matter", time.UnixMilli(42).In(time.FixedZone("x", 3600)), 42},
	}
	for _, tt := range tests {
		got := toMillis(tt.t)
		// The zero Time and the far past only need to be refused (negative).
		if tt.want == -1 && got < 0 {
			continue
		}
		if got != tt.want {
			t.Errorf("%s: toMillis(%v) = %d, want %d", tt.name, tt.t, got, tt.want)
		}
	}
}

func TestFromMillisRoundTrips(t *testing.T) {
	for _, ms := range []int64{0, 1, 999, 1_700_000_000_123, maxAlarmMillis} {
		got := fromMillis(ms)
		if got.Location() != time.UTC {
			t.Errorf("fromMillis(%d) in %v, want UTC", ms, got.Location())
		}
		if back := toMillis(got); back != ms {
			t.Errorf("toMillis(fromMillis(%d)) = %d", ms, back)
		}
	}
}
