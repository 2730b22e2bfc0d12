// Package wasmkeeptest is a fake wasmkeep host for a guest's own native
// tests: go test on the build machine, without WebAssembly. It runs the
// handlers the guest registered with the SDK (HandleRequest, HandleAlarm,
// HandleInit, or package timers' Handle) against an in-memory key/value
// table, one alarm and a clock the test moves, with the host's semantics
// from abi/ABI.md:
//
//   - every call is an event, in a transaction: a handler that returns an
//     error (or panics) has its key/value writes and alarm changes rolled
//     back, as the host does;
//   - on-init runs once, before the actor's first other event, and again
//     before the next one while it fails;
//   - moving the clock (Advance, AdvanceTo) delivers the alarm whenever it
//     falls due, with its scheduled time and retry count, at that time on
//     the clock;
//   - a failing alarm handler is retried on the host's committed backoff:
//     1 s after the first failure, doubling to 5 min, the alarm moved to the
//     retry time unless the handler set a later one or cleared it, and the
//     failure count passed to the next attempt; WithMaxAttempts gives up as
//     a host configured with an attempt limit does;
//   - Down moves the clock without delivering, as if the actor's node were
//     down, so the next Advance delivers the alarm late;
//   - outside an event every SDK call fails with EPERM, as in a guest's
//     init function.
//
// Handlers that read the time should use wasmkeep.Now, which is the host's
// clock: time.Now in a guest, this fake's clock in a native test.
//
// The SDK's handlers and its host are process-wide, as in a guest, so one
// Host is installed at a time and tests that use it must not run in
// parallel. Create it with New, and Close it at the end of the test:
//
//	h := wasmkeeptest.New()
//	t.Cleanup(h.Close)
//	resp, err := h.Request([]byte("start 1000"))
//	fired := h.Advance(time.Second) // the alarm set for now+1s fires
//
// Under wasip1 the package is empty: a guest's tests run natively.
package wasmkeeptest
