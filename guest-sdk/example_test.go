package wasmkeep_test

import (
	"errors"
	"strconv"
	"time"

	wasmkeep "github.com/wasmkeep/alarms/guest-sdk"
)

// A guest registers its handlers in init: a request sets the alarm a number
// of seconds ahead, and the alarm handler counts its runs in the actor's
// key/value table. Returning an error from the alarm handler retries it
// with committed backoff.
func Example() {
	wasmkeep.HandleRequest(func(req []byte) ([]byte, error) {
		secs, err := strconv.Atoi(string(req))
		if err != nil {
			return nil, err // the event fails; its writes roll back
		}
		return []byte("ok"), wasmkeep.SetAlarm(time.Now().Add(time.Duration(secs) * time.Second))
	})
	wasmkeep.HandleAlarm(func(scheduled time.Time, retryCount int) error {
		n := 0
		if v, err := wasmkeep.Get("runs"); err == nil {
			n, _ = strconv.Atoi(string(v))
		} else if !errors.Is(err, wasmkeep.ENOENT) {
			return err
		}
		return wasmkeep.Put("runs", []byte(strconv.Itoa(n+1)))
	})
}

// GetAlarm reports the pending alarm; ENOENT when none is set.
func ExampleGetAlarm() {
	at, err := wasmkeep.GetAlarm()
	switch {
	case errors.Is(err, wasmkeep.ENOENT):
		// no alarm pending
	case err == nil:
		_ = at // the time it is set for (during retries: the next attempt)
	}
}
