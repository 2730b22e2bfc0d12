// Command reminders is a small wasmkeep actor built on package timers: named
// one-shot reminders, and a daily digest on a cron schedule, all over the
// actor's one alarm.
//
// Requests (text bodies):
//
//	remind <name> <seconds> <text>   a reminder that far ahead (replacing one of that name)
//	cancel <name>                    cancel it
//	list                             the timers, one a line: "<name> <kind> <due, RFC 3339>"
//	sent                             the reminders sent so far, one a line
//	every <name> <seconds>           an interval timer: a tick every that many seconds
//	stop <name>                      cancel the interval timer
//	ticks <name>                     how many times it has ticked
//	whoami                           the actor's identity, tenant/class/name
//
// A due reminder is "sent" by appending its text to the key "sent"; the
// digest, at 09:00 UTC each day, counts its runs under "digests"; an
// interval timer counts its ticks under "ticks/<name>" (after downtime, it
// ticks once and skips the ticks it missed). Its tests
// run the handlers natively against the SDK's fake host (wasmkeeptest).
//
// Build it with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o reminders.wasm .
package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	wasmkeep "github.com/wasmkeep/alarms/guest-sdk"
	"github.com/wasmkeep/alarms/guest-sdk/timers"
)

func init() {
	wasmkeep.HandleInit(func() error {
		return timers.Set("digest", timers.Cron("0 9 * * *"), nil)
	})
	wasmkeep.HandleRequest(onRequest)
	timers.Handle(onTimer)
}

// main is never run: the module is a reactor.
func main() {}

func onRequest(req []byte) ([]byte, error) {
	f := strings.Fields(string(req))
	switch {
	case len(f) >= 4 && f[0] == "remind":
		secs, err := strconv.Atoi(f[2])
		if err != nil || secs < 0 {
			return nil, fmt.Errorf("remind: want seconds, got %q", f[2])
		}
		at := wasmkeep.Now().Add(time.Duration(secs) * time.Second)
		return []byte("ok"), timers.Set("remind/"+f[1], timers.At(at), []byte(strings.Join(f[3:], " ")))
	case len(f) == 2 && f[0] == "cancel":
		found, err := timers.Cancel("remind/" + f[1])
		return []byte(strconv.FormatBool(found)), err
	case len(f) == 3 && f[0] == "every":
		secs, err := strconv.Atoi(f[2])
		if err != nil || secs <= 0 {
			return nil, fmt.Errorf("every: want positive seconds, got %q", f[2])
		}
		return []byte("ok"), timers.Set("every/"+f[1], timers.Every(time.Duration(secs)*time.Second), nil)
	case len(f) == 2 && f[0] == "stop":
		found, err := timers.Cancel("every/" + f[1])
		return []byte(strconv.FormatBool(found)), err
	case len(f) == 2 && f[0] == "ticks":
		n, err := count("ticks/" + f[1])
		return strconv.AppendInt(nil, int64(n), 10), err
	case len(f) == 1 && f[0] == "whoami":
		id, err := wasmkeep.Self()
		return []byte(id.String()), err
	case len(f) == 1 && f[0] == "list":
		list, err := timers.List()
		var b strings.Builder
		for _, t := range list {
			fmt.Fprintf(&b, "%s %s %s\n", t.Name, t.Kind, t.Due.Format(time.RFC3339))
		}
		return []byte(b.String()), err
	case len(f) == 1 && f[0] == "sent":
		v, err := wasmkeep.Get("sent")
		if errors.Is(err, wasmkeep.ErrNotFound) {
			return nil, nil
		}
		return v, err
	}
	return nil, fmt.Errorf("unknown request %q", req)
}

// onTimer runs each due timer: the digest, or a reminder. A failure here
// retries the whole on-alarm event, so both only append what a rolled-back
// attempt did not commit.
func onTimer(f timers.Fired) error {
	if f.Name == "digest" || strings.HasPrefix(f.Name, "every/") {
		key := "digests"
		if f.Name != "digest" {
			key = "ticks/" + strings.TrimPrefix(f.Name, "every/")
		}
		n, err := count(key)
		if err != nil {
			return err
		}
		return wasmkeep.Put(key, strconv.AppendInt(nil, int64(n+1), 10))
	}
	sent, err := wasmkeep.Get("sent")
	if err != nil && !errors.Is(err, wasmkeep.ErrNotFound) {
		return err
	}
	line := fmt.Sprintf("%s %s: %s\n", f.Due.Format(time.RFC3339), strings.TrimPrefix(f.Name, "remind/"), f.Data)
	return wasmkeep.Put("sent", append(sent, line...))
}

// count reads a counter kept under key as decimal text (0 when absent).
func count(key string) (int, error) {
	v, err := wasmkeep.Get(key)
	if errors.Is(err, wasmkeep.ErrNotFound) {
		return 0, nil
	}
	n, _ := strconv.Atoi(string(v))
	return n, err
}
