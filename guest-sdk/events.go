package wasmkeep

import (
	"io"
	"time"
)

// The handlers the exports call; set from init functions, read during events.
// A guest instance runs one event at a time, so no locking is needed.
var (
	alarmHandler   func(scheduled time.Time, retryCount int) error
	requestHandler func(req []byte) ([]byte, error)
	initHandler    func() error
)

// HandleAlarm registers the function the host calls when the actor's alarm
// fires (the on-alarm export). scheduled is the time the alarm was set for;
// retryCount is how many attempts for this alarm have failed before (0 on the
// first). Returning nil marks the alarm handled. Returning an error (or
// panicking, which also ends the instance) fails the event: its writes are
// undone and the host retries the alarm after 1 s, doubling up to 5 min. An
// alarm the handler set for after the retry time, or a clear, stands.
//
// Register handlers from an init function: a reactor's main never runs.
// Without a handler, SetAlarm returns ErrNoAlarmHandler, and an alarm that
// fires anyway (one set by an earlier build) is dropped: on-alarm reports it
// handled and writes a line to standard error, since retrying cannot help
// until a build with a handler is deployed, and would wake the actor every
// five minutes until then.
func HandleAlarm(f func(scheduled time.Time, retryCount int) error) {
	alarmHandler = f
}

// HandleRequest registers the function the host calls for each request (the
// on-request export). req is the request body; the returned bytes are the
// response body. Returning an error fails the event: its writes, alarm
// changes included, are undone, no response is written, and the error is
// written to standard error. Without a handler, every request fails.
func HandleRequest(f func(req []byte) ([]byte, error)) {
	requestHandler = f
}

// HandleInit registers the function the host calls once per actor, before its
// first other event (the on-init export). Returning an error fails the event;
// the host runs it again before the next one. Without a handler, on-init
// succeeds and does nothing.
func HandleInit(f func() error) {
	initHandler = f
}

// onAlarm is the on-alarm export: 0 when handled, 1 when failed.
func onAlarm(scheduledMs int64, retryCount int32) int32 {
	if alarmHandler == nil {
		logLine("on-alarm: no alarm handler registered; the alarm is dropped")
		return 0
	}
	if err := alarmHandler(fromMillis(scheduledMs), int(retryCount)); err != nil {
		logLine("on-alarm: " + err.Error())
		return 1
	}
	return 0
}

// onRequest is the on-request export: it reads the request, runs the handler
// and writes its response; 0 when all went well, 1 otherwise.
func onRequest(reqLen int32) int32 {
	if requestHandler == nil {
		logLine("on-request: no request handler registered")
		return 1
	}
	if reqLen < 0 {
		logLine("on-request: negative request length from the host")
		return 1
	}
	req := make([]byte, reqLen)
	if reqLen > 0 {
		if err := check("request-read", hostRequestRead(bytesPtr(req), uint32(reqLen))); err != nil {
			logLine("on-request: " + err.Error())
			return 1
		}
	}
	resp, err := requestHandler(req)
	if err != nil {
		logLine("on-request: " + err.Error())
		return 1
	}
	if len(resp) > 0 {
		if err := check("response-write", hostResponseWrite(bytesPtr(resp), uint32(len(resp)))); err != nil {
			logLine("on-request: " + err.Error())
			return 1
		}
	}
	return 0
}

// onInit is the on-init export: 0 when done, 1 when the handler failed.
func onInit() int32 {
	if initHandler == nil {
		return 0
	}
	if err := initHandler(); err != nil {
		logLine("on-init: " + err.Error())
		return 1
	}
	return 0
}

// logLine writes a line for a failed event to standard error (the host may
// collect it in its logs), or to the fake host's log in a native test.
func logLine(msg string) {
	// Nothing to do if standard error fails too.
	_, _ = io.WriteString(logWriter(), "wasmkeep: "+msg+"\n")
}
