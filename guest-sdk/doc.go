// Package wasmkeep is the Go SDK for WebAssembly actors run by a wasmkeep
// host: durable alarms, the request being served, and a small key/value
// table kept in the actor's database.
//
// An actor is a reactor module built with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o actor.wasm .
//
// The host calls it once per event: a request, the actor's alarm firing, or
// its one-time initialisation. Each event runs in a transaction: its key/value
// writes and alarm changes commit together when the handler returns nil, and
// are undone when it returns an error. Calls made outside an event (from an
// init function, say) return an error wrapping EPERM.
//
// Register handlers from an init function; a reactor's main is never run, but
// package main still needs one:
//
//	package main
//
//	import (
//		"errors"
//		"strconv"
//		"time"
//
//		wasmkeep "github.com/wasmkeep/alarms/guest-sdk"
//	)
//
//	func init() {
//		wasmkeep.HandleRequest(func(req []byte) ([]byte, error) {
//			// Remind us in a minute; a later request moves the reminder.
//			if err := wasmkeep.SetAlarm(time.Now().Add(time.Minute)); err != nil {
//				return nil, err
//			}
//			return []byte("reminder set"), nil
//		})
//		wasmkeep.HandleAlarm(func(scheduled time.Time, retryCount int) error {
//			v, err := wasmkeep.Get("reminders")
//			if err != nil && !errors.Is(err, wasmkeep.ErrNotFound) {
//				return err // fails the event; the host retries it
//			}
//			n, _ := strconv.Atoi(string(v)) // 0 when not found
//			return wasmkeep.Put("reminders", []byte(strconv.Itoa(n+1)))
//		})
//	}
//
//	func main() {}
//
// Each actor has at most one alarm. A failing alarm handler is retried after
// 1 s, then 2 s, 4 s and so on up to 5 min; the count of failures so far is
// the handler's retryCount, and it survives restarts and moves between nodes.
// time.Now reads the host's clock, and so does Now.
//
// Package timers (guest-sdk/timers) keeps any number of named timers,
// intervals and cron schedules over the one alarm.
//
// Errors from the host are *HostError values wrapping an Errno, so
// errors.Is(err, wasmkeep.EIO) works; the SDK never panics on them. The
// imports and exports it uses are described in the module's abi/ABI.md.
//
// Outside wasip1 (under go test on the build machine) the package compiles,
// but there is no host: every call returns an error wrapping EPERM, unless a
// test installs the fake host of package wasmkeeptest
// (guest-sdk/wasmkeeptest), which runs the registered handlers against an
// in-memory table, alarm and clock. Handlers that read the time with Now
// rather than time.Now then see the fake's clock.
package wasmkeep
