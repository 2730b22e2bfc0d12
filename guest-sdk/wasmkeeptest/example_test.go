//go:build !wasip1

package wasmkeeptest_test

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	wasmkeep "github.com/wasmkeep/alarms/guest-sdk"
	"github.com/wasmkeep/alarms/guest-sdk/wasmkeeptest"
)

// A guest's handlers, as its init function registers them: a request
// "<seconds>" sets the alarm that far ahead (on the host's clock,
// wasmkeep.Now), and the alarm handler counts its runs, failing on its first
// attempt. A test drives them through the fake host: advancing the clock
// fires the alarm, the failure rolls back its write and is retried a second
// later with retry count 1.
func Example() {
	wasmkeep.HandleRequest(func(req []byte) ([]byte, error) {
		secs, err := strconv.Atoi(string(req))
		if err != nil {
			return nil, err
		}
		return []byte("ok"), wasmkeep.SetAlarm(wasmkeep.Now().Add(time.Duration(secs) * time.Second))
	})
	wasmkeep.HandleAlarm(func(scheduled time.Time, retryCount int) error {
		n := 0
		if v, err := wasmkeep.Get("runs"); err == nil {
			n, _ = strconv.Atoi(string(v))
		}
		if err := wasmkeep.Put("runs", []byte(strconv.Itoa(n+1))); err != nil {
			return err
		}
		if retryCount == 0 {
			return errors.New("first attempt fails")
		}
		return nil
	})

	h := wasmkeeptest.New(wasmkeeptest.WithTime(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)))
	defer h.Close() // in a test: t.Cleanup(h.Close)

	resp, err := h.Request([]byte("30"))
	fmt.Println(string(resp), err)
	alarm, _ := h.Alarm()
	fmt.Println("alarm", alarm.Format(time.TimeOnly))

	for _, f := range h.Advance(time.Minute) {
		fmt.Println("fired at", f.At.Format(time.TimeOnly), "retry", f.RetryCount, "failed", f.Err != nil)
	}
	runs, _ := h.Get("runs")
	_, pending := h.Alarm()
	fmt.Println("runs", string(runs), "alarm pending", pending)
	// Output:
	// ok <nil>
	// alarm 12:00:30
	// fired at 12:00:30 retry 0 failed true
	// fired at 12:00:31 retry 1 failed false
	// runs 1 alarm pending false
}
