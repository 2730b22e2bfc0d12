// Command counter-actor is an example wasmkeep actor. It counts the requests
// it serves and the times its alarm fired, in its key/value table (so the
// counts survive restarts and moves between nodes), and, once started, re-arms
// its alarm every interval.
//
// Requests (text bodies):
//
//	get          (or an empty body) the state, as JSON
//	start <ms>   store the interval and set the alarm for now + interval
//	stop         clear the alarm and the interval
//
// Every request counts, and every answer is the state after it:
//
//	{"requests":3,"fired":1,"alarm_ms":1700000060000,"interval_ms":60000}
//
// alarm_ms is null when no alarm is set; interval_ms is 0 when stopped. An
// unknown command fails the request, so it is not counted.
//
// Build it with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o counter-actor.wasm .
package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	wasmkeep "github.com/wasmkeep/alarms/guest-sdk"
)

// Keys in the actor's key/value table, each a decimal number.
const (
	keyRequests = "requests"
	keyFired    = "fired"
	keyInterval = "interval_ms"
)

func init() {
	wasmkeep.HandleRequest(onRequest)
	wasmkeep.HandleAlarm(onAlarm)
}

// main is never run: the module is a reactor.
func main() {}

func onRequest(req []byte) ([]byte, error) {
	cmd, arg, _ := strings.Cut(strings.TrimSpace(string(req)), " ")
	switch cmd {
	case "", "get":
	case "start":
		ms, err := strconv.ParseInt(strings.TrimSpace(arg), 10, 64)
		if err != nil || ms <= 0 {
			return nil, fmt.Errorf("start: want a positive interval in ms, got %q", arg)
		}
		if err := putInt(keyInterval, ms); err != nil {
			return nil, err
		}
		if err := wasmkeep.SetAlarm(time.Now().Add(time.Duration(ms) * time.Millisecond)); err != nil {
			return nil, err
		}
	case "stop":
		if err := wasmkeep.ClearAlarm(); err != nil {
			return nil, err
		}
		if err := wasmkeep.Delete(keyInterval); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unknown command %q (want get, start <ms> or stop)", cmd)
	}
	if _, err := addInt(keyRequests, 1); err != nil {
		return nil, err
	}
	return state()
}

func onAlarm(scheduled time.Time, _ int) error {
	if _, err := addInt(keyFired, 1); err != nil {
		return err
	}
	interval, err := getInt(keyInterval)
	if err != nil || interval <= 0 {
		return err // stopped: leave the alarm unset
	}
	every := time.Duration(interval) * time.Millisecond
	next := scheduled.Add(every)
	if now := time.Now(); !next.After(now) {
		// Delivered late (the actor's node was down, say): skip the
		// missed firings rather than fire them back to back.
		next = now.Add(every)
	}
	return wasmkeep.SetAlarm(next)
}

// state renders the counters, the alarm and the interval as JSON.
func state() ([]byte, error) {
	requests, err := getInt(keyRequests)
	if err != nil {
		return nil, err
	}
	fired, err := getInt(keyFired)
	if err != nil {
		return nil, err
	}
	interval, err := getInt(keyInterval)
	if err != nil {
		return nil, err
	}
	alarm := "null"
	switch at, err := wasmkeep.GetAlarm(); {
	case err == nil:
		alarm = strconv.FormatInt(at.UnixMilli(), 10)
	case !errors.Is(err, wasmkeep.ErrNotSet):
		return nil, err
	}
	return fmt.Appendf(nil, `{"requests":%d,"fired":%d,"alarm_ms":%s,"interval_ms":%d}`,
		requests, fired, alarm, interval), nil
}

// getInt reads a counter; a missing key is 0.
func getInt(key string) (int64, error) {
	v, err := wasmkeep.Get(key)
	if errors.Is(err, wasmkeep.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("counter %q holds %q: %w", key, v, err)
	}
	return n, nil
}

func putInt(key string, n int64) error {
	return wasmkeep.Put(key, strconv.AppendInt(nil, n, 10))
}

// addInt adds d to a counter and returns the new value.
func addInt(key string, d int64) (int64, error) {
	n, err := getInt(key)
	if err != nil {
		return 0, err
	}
	n += d
	return n, putInt(key, n)
}
