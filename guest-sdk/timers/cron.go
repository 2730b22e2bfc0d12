package timers

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// CronSchedule is a parsed 5-field cron expression, evaluated in UTC.
//
// The fields are minute (0-59), hour (0-23), day of month (1-31), month
// (1-12 or JAN-DEC) and day of week (0-7 or SUN-SAT; 0 and 7 are Sunday).
// Each field is * or a comma-separated list of values, ranges (1-5) and
// steps (*/15, 1-30/2, and 5/10 meaning 5 to the field's maximum by 10).
// Names are case-insensitive; a range cannot wrap (FRI-MON is refused).
// The macros @yearly (or @annually), @monthly, @weekly, @daily (or
// @midnight) and @hourly stand for their usual five fields.
//
// Days follow Vixie cron (crontab(5)): when both the day of month and the
// day of week are restricted (neither field starts with *), a day matches if
// either matches ("0 0 1 * MON" is the 1st and every Monday); otherwise it
// must match both (with * matching every day). An expression that can never
// match (such as "0 0 30 2 *") is refused.
type CronSchedule struct {
	spec                     string
	minute, hour, dom, month uint64 // bit n set: value n matches
	dow                      uint64 // bits 0-6, Sunday is 0
	domStar, dowStar         bool
}

var cronMacros = map[string]string{
	"@yearly":   "0 0 1 1 *",
	"@annually": "0 0 1 1 *",
	"@monthly":  "0 0 1 * *",
	"@weekly":   "0 0 * * 0",
	"@daily":    "0 0 * * *",
	"@midnight": "0 0 * * *",
	"@hourly":   "0 * * * *",
}

type cronField struct {
	name     string
	min, max int
	names    []string // names[i] is the value min+i, when the field has names
}

var (
	fieldMinute = cronField{name: "minute", min: 0, max: 59}
	fieldHour   = cronField{name: "hour", min: 0, max: 23}
	fieldDom    = cronField{name: "day of month", min: 1, max: 31}
	fieldMonth  = cronField{name: "month", min: 1, max: 12,
		names: []string{"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}}
	// 7 is Sunday too; it is folded into 0 after parsing.
	fieldDow = cronField{name: "day of week", min: 0, max: 7,
		names: []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}}
)

// ParseCron parses a 5-field cron expression (see CronSchedule).
func ParseCron(spec string) (*CronSchedule, error) {
	expr := strings.TrimSpace(spec)
	if strings.HasPrefix(expr, "@") {
		m, ok := cronMacros[strings.ToLower(expr)]
		if !ok {
			return nil, fmt.Errorf("timers: cron %q: unknown macro (want @yearly, @monthly, @weekly, @daily or @hourly)", spec)
		}
		expr = m
	}
	f := strings.Fields(expr)
	if len(f) != 5 {
		return nil, fmt.Errorf("timers: cron %q: want 5 fields (minute hour day-of-month month day-of-week), got %d", spec, len(f))
	}
	c := &CronSchedule{spec: spec}
	var err error
	parse := func(s string, fd cronField) uint64 {
		if err != nil {
			return 0
		}
		var b uint64
		b, err = fd.parse(s)
		if err != nil {
			err = fmt.Errorf("timers: cron %q: %w", spec, err)
		}
		return b
	}
	c.minute = parse(f[0], fieldMinute)
	c.hour = parse(f[1], fieldHour)
	c.dom = parse(f[2], fieldDom)
	c.month = parse(f[3], fieldMonth)
	c.dow = parse(f[4], fieldDow)
	if err != nil {
		return nil, err
	}
	if c.dow&(1<<7) != 0 {
		c.dow = c.dow&^(1<<7) | 1
	}
	c.domStar, c.dowStar = f[2][0] == '*', f[4][0] == '*'
	if !c.domStar && c.dowStar && !c.domFitsAMonth() {
		return nil, fmt.Errorf("timers: cron %q: never matches (no month in it has such a day)", spec)
	}
	return c, nil
}

// domFitsAMonth reports whether some month of the expression has a day of
// month of it (February counting 29 days, which leap years have).
func (c *CronSchedule) domFitsAMonth() bool {
	first := bits.TrailingZeros64(c.dom) // the smallest day
	for m := 1; m <= 12; m++ {
		if c.month&(1<<m) != 0 && first <= daysIn(time.Month(m), 2000) {
			return true
		}
	}
	return false
}

// parse parses one field into a bit set.
func (fd cronField) parse(s string) (uint64, error) {
	var set uint64
	for item := range strings.SplitSeq(s, ",") {
		if item == "" {
			return 0, fmt.Errorf("%s %q: empty list item", fd.name, s)
		}
		rng, stepStr, hasStep := strings.Cut(item, "/")
		lo, hi := fd.min, fd.max
		switch {
		case rng == "*":
		case strings.Contains(rng, "-"):
			a, b, _ := strings.Cut(rng, "-")
			var err error
			if lo, err = fd.value(a); err != nil {
				return 0, err
			}
			if hi, err = fd.value(b); err != nil {
				return 0, err
			}
			if lo > hi {
				return 0, fmt.Errorf("%s %q: range %s runs backwards", fd.name, s, rng)
			}
		default:
			v, err := fd.value(rng)
			if err != nil {
				return 0, err
			}
			lo, hi = v, v
			if hasStep { // "5/10": from 5 to the maximum
				hi = fd.max
				if fd.names != nil && fd.max == 7 { // day of week: to Saturday
					hi = 6
				}
			}
		}
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepStr)
			if err != nil || n < 1 {
				return 0, fmt.Errorf("%s %q: step %q is not a positive number", fd.name, s, stepStr)
			}
			step = n
		}
		if rng == "*" && fd.max == 7 { // day of week: * is 0-6
			hi = 6
		}
		for v := lo; v <= hi; v += step {
			set |= 1 << v
		}
	}
	return set, nil
}

// value parses one number or name of the field.
func (fd cronField) value(s string) (int, error) {
	for i, n := range fd.names {
		if strings.EqualFold(s, n) {
			return fd.min + i, nil
		}
	}
	v, err := strconv.Atoi(s)
	if err != nil || s[0] == '+' || s[0] == '-' {
		return 0, fmt.Errorf("%s: %q is not a number", fd.name, s)
	}
	if v < fd.min || v > fd.max {
		return 0, fmt.Errorf("%s: %d is outside %d-%d", fd.name, v, fd.min, fd.max)
	}
	return v, nil
}

// String returns the expression as given to ParseCron.
func (c *CronSchedule) String() string { return c.spec }

// errNoNext should never be seen: ParseCron refuses expressions that never
// match, and every other one matches within eight years (the 29th of
// February skips at most one leap year, such as 2100).
var errNoNext = errors.New("timers: cron: no matching time within nine years")

// Next returns the first time strictly after t, on a whole minute, that
// the expression matches, in UTC.
func (c *CronSchedule) Next(t time.Time) time.Time {
	n, _ := c.next(t)
	return n
}

func (c *CronSchedule) next(after time.Time) (time.Time, error) {
	t := after.UTC().Truncate(time.Minute).Add(time.Minute)
	limit := t.Year() + 9
	for t.Year() <= limit {
		switch {
		case c.month&(1<<int(t.Month())) == 0:
			t = time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC)
		case !c.dayMatches(t):
			t = time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, time.UTC)
		case c.hour&(1<<t.Hour()) == 0:
			t = t.Truncate(time.Hour).Add(time.Hour)
		case c.minute&(1<<t.Minute()) == 0:
			t = t.Add(time.Minute)
		default:
			return t, nil
		}
	}
	return time.Time{}, errNoNext
}

func (c *CronSchedule) dayMatches(t time.Time) bool {
	dom := c.dom&(1<<t.Day()) != 0
	dow := c.dow&(1<<int(t.Weekday())) != 0
	if c.domStar || c.dowStar {
		return dom && dow
	}
	return dom || dow
}

// daysIn returns the number of days in month m of year y.
func daysIn(m time.Month, y int) int {
	return time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
}
