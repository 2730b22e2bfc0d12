//go:build !wasip1

package timers

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func utc(s string) time.Time {
	t, err := time.Parse("2006-01-02 15:04", s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestCronNext(t *testing.T) {
	tests := []struct {
		spec, after, want string
	}{
		{"* * * * *", "2025-01-01 12:00", "2025-01-01 12:01"},
		{"*/15 * * * *", "2025-01-01 12:14", "2025-01-01 12:15"},
		{"*/15 * * * *", "2025-01-01 12:45", "2025-01-01 13:00"},
		{"5/20 * * * *", "2025-01-01 12:25", "2025-01-01 12:45"},
		{"5/20 * * * *", "2025-01-01 12:45", "2025-01-01 13:05"},
		{"30 9-17/4 * * *", "2025-01-01 09:30", "2025-01-01 13:30"},
		{"30 9-17/4 * * *", "2025-01-01 17:30", "2025-01-02 09:30"},
		{"0 8,12,18 * * *", "2025-01-01 12:00", "2025-01-01 18:00"},
		// Month ends: the 31st skips the months without one.
		{"0 0 31 * *", "2025-01-31 00:00", "2025-03-31 00:00"},
		{"0 0 31 * *", "2025-04-01 00:00", "2025-05-31 00:00"},
		{"0 0 30 * *", "2025-01-30 00:00", "2025-03-30 00:00"},
		{"59 23 28-31 * *", "2025-02-28 23:59", "2025-03-28 23:59"},
		// The 29th of February: the next leap year, and 2100 is not one.
		{"0 0 29 2 *", "2025-01-01 00:00", "2028-02-29 00:00"},
		{"0 0 29 2 *", "2096-03-01 00:00", "2104-02-29 00:00"},
		// Year end.
		{"0 0 1 1 *", "2025-12-31 23:59", "2026-01-01 00:00"},
		{"@yearly", "2025-06-01 00:00", "2026-01-01 00:00"},
		{"@monthly", "2025-02-15 00:00", "2025-03-01 00:00"},
		{"@daily", "2025-02-28 00:00", "2025-03-01 00:00"},
		{"@hourly", "2025-02-28 23:00", "2025-03-01 00:00"},
		// Days of the week (2025-01-04 is a Saturday).
		{"0 12 * * MON-FRI", "2025-01-04 08:00", "2025-01-06 12:00"},
		{"0 12 * * 1-5", "2025-01-06 12:00", "2025-01-07 12:00"},
		{"0 0 * * 0", "2025-01-01 00:00", "2025-01-05 00:00"},
		{"0 0 * * 7", "2025-01-01 00:00", "2025-01-05 00:00"},
		{"0 0 * * sun", "2025-01-01 00:00", "2025-01-05 00:00"},
		{"0 0 * * 5-7", "2025-01-04 00:00", "2025-01-05 00:00"},
		{"@weekly", "2025-01-05 00:00", "2025-01-12 00:00"},
		{"0 0 * * */2", "2025-01-04 00:00", "2025-01-05 00:00"}, // Sun, Tue, Thu, Sat
		// Both day fields restricted: either matches (2025-01-01 is a Wednesday).
		{"0 0 1 * MON", "2025-01-01 00:00", "2025-01-06 00:00"},
		{"0 0 1 * MON", "2025-01-27 00:00", "2025-02-01 00:00"},
		{"0 0 30 2 MON", "2025-01-01 00:00", "2025-02-03 00:00"}, // February has no 30th; its Mondays match
		// Day of month starting with *: both must match (odd days that are Mondays).
		{"0 0 */2 * MON", "2025-01-01 00:00", "2025-01-13 00:00"},
		// Months by name, case-insensitive, and in lists.
		{"0 0 1 JAN,jul *", "2025-01-01 00:00", "2025-07-01 00:00"},
		{"0 0 1 mar-may/2 *", "2025-03-01 00:00", "2025-05-01 00:00"},
	}
	for _, tt := range tests {
		c, err := ParseCron(tt.spec)
		if err != nil {
			t.Errorf("ParseCron(%q): %v", tt.spec, err)
			continue
		}
		if got := c.Next(utc(tt.after)); !got.Equal(utc(tt.want)) || got.Location() != time.UTC {
			t.Errorf("%q after %s = %v, want %s UTC", tt.spec, tt.after, got, tt.want)
		}
	}
}

func TestCronNextIsStrictlyAfterAndIgnoresTheZone(t *testing.T) {
	c, err := ParseCron("0 * * * *")
	if err != nil {
		t.Fatal(err)
	}
	noon := utc("2025-01-01 12:00")
	if got := c.Next(noon); !got.Equal(utc("2025-01-01 13:00")) {
		t.Errorf("Next(12:00) = %v, want 13:00 (strictly after)", got)
	}
	if got := c.Next(noon.Add(-time.Millisecond)); !got.Equal(noon) {
		t.Errorf("Next(11:59:59.999) = %v, want 12:00", got)
	}
	// 12:30 in UTC+2 is 10:30 UTC: the schedule is in UTC.
	if got := c.Next(noon.Add(30 * time.Minute).In(time.FixedZone("x", 7200))); !got.Equal(utc("2025-01-01 13:00")) || got.Location() != time.UTC {
		t.Errorf("Next of a time in another zone = %v, want 13:00 UTC", got)
	}
}

func TestParseCronRefuses(t *testing.T) {
	for _, spec := range []string{
		"", "* * * *", "* * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * 32 * *",
		"* * * 0 *", "* * * 13 *", "* * * * 8", "5-1 * * * *", "* * * * FRI-MON", "*/0 * * * *",
		"*/x * * * *", "a * * * *", "1,,2 * * * *", "-1 * * * *", "+5 * * * *", "1- * * * *",
		"* * * FOO *", "@reboot", "@every 5m",
		"0 0 30 2 *", "0 0 31 4,6,9,11 *", // never match
	} {
		if c, err := ParseCron(spec); err == nil {
			t.Errorf("ParseCron(%q) = %v, want an error", spec, c)
		} else if !strings.Contains(err.Error(), "timers: cron") {
			t.Errorf("ParseCron(%q) error %q does not name the package", spec, err)
		}
	}
}

// TestCronNextAgainstAScan checks Next from random times against a scan of
// every minute: the result matches, and no minute between matches.
func TestCronNextAgainstAScan(t *testing.T) {
	specs := []string{"*/7 */5 * * *", "15 3 * * MON,THU", "0 0 1,15 * *", "0 */6 13 * FRI", "45 23 31 * *", "0 0 */3 2 *"}
	r := rand.New(rand.NewPCG(1, 2))
	for _, spec := range specs {
		c, err := ParseCron(spec)
		if err != nil {
			t.Fatal(err)
		}
		for range 20 {
			after := utc("2024-01-01 00:00").Add(time.Duration(r.Int64N(int64(3*365*24*time.Hour))) + time.Duration(r.IntN(60000))*time.Millisecond)
			got := c.Next(after)
			if !got.After(after) || got.Second() != 0 || got.Nanosecond() != 0 || !c.matches(got) {
				t.Fatalf("%q: Next(%v) = %v, not a matching minute after it", spec, after, got)
			}
			for m := after.Truncate(time.Minute).Add(time.Minute); m.Before(got); m = m.Add(time.Minute) {
				if c.matches(m) {
					t.Fatalf("%q: Next(%v) = %v, but %v matches first", spec, after, got, m)
				}
			}
		}
	}
}

func (c *CronSchedule) matches(t time.Time) bool {
	return c.minute&(1<<t.Minute()) != 0 && c.hour&(1<<t.Hour()) != 0 &&
		c.month&(1<<int(t.Month())) != 0 && c.dayMatches(t)
}
