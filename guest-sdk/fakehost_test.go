//go:build !wasip1

package wasmkeep

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/guest-sdk/internal/native"
)

// fakeHost is an in-memory host with the ABI's semantics, counting calls and
// able to fail any import with a chosen errno.
type fakeHost struct {
	alarm    *int64
	kv       map[string][]byte
	req      []byte
	resp     []byte
	fail     map[string]uint32 // import name -> errno to return instead
	calls    map[string]int
	setTimes []int64
	now      time.Time
	id       string // what actor-id gives
}

func (h *fakeHost) Now() time.Time { return h.now }

func (h *fakeHost) call(op string) (uint32, bool) {
	h.calls[op]++
	if e, ok := h.fail[op]; ok {
		return e, true
	}
	return 0, false
}

func (h *fakeHost) SetAlarm(atMs int64) uint32 {
	if e, ok := h.call("set-alarm"); ok {
		return e
	}
	h.setTimes = append(h.setTimes, atMs)
	if atMs < 0 || atMs > maxAlarmMillis {
		return uint32(EINVAL)
	}
	h.alarm = &atMs
	return 0
}

func (h *fakeHost) GetAlarm(out *int64) uint32 {
	if e, ok := h.call("get-alarm"); ok {
		return e
	}
	if h.alarm == nil {
		return uint32(ENOENT)
	}
	*out = *h.alarm
	return 0
}

func (h *fakeHost) ClearAlarm() uint32 {
	if e, ok := h.call("clear-alarm"); ok {
		return e
	}
	h.alarm = nil
	return 0
}

func (h *fakeHost) RequestRead(buf []byte) uint32 {
	if e, ok := h.call("request-read"); ok {
		return e
	}
	copy(buf, h.req)
	return 0
}

func (h *fakeHost) ResponseWrite(buf []byte) uint32 {
	if e, ok := h.call("response-write"); ok {
		return e
	}
	h.resp = append(h.resp, buf...)
	return 0
}

func (h *fakeHost) KVGet(key string, buf []byte, outLen *uint32) uint32 {
	if e, ok := h.call("kv-get"); ok {
		return e
	}
	v, ok := h.kv[key]
	if !ok {
		return uint32(ENOENT)
	}
	*outLen = uint32(len(v))
	copy(buf, v)
	return 0
}

func (h *fakeHost) KVPut(key string, val []byte) uint32 {
	if e, ok := h.call("kv-put"); ok {
		return e
	}
	if len(key) > 1024 || len(val) > 1<<20 {
		return uint32(E2BIG)
	}
	h.kv[key] = bytes.Clone(val)
	return 0
}

func (h *fakeHost) KVDelete(key string) uint32 {
	if e, ok := h.call("kv-delete"); ok {
		return e
	}
	delete(h.kv, key)
	return 0
}

func (h *fakeHost) ActorID(buf []byte, outLen *uint32) uint32 {
	if e, ok := h.call("actor-id"); ok {
		return e
	}
	*outLen = uint32(len(h.id))
	if len(h.id) > len(buf) {
		return uint32(E2BIG)
	}
	copy(buf, h.id)
	return 0
}

// withHost installs a fresh fake host and clears the handlers and the log for
// one test.
func withHost(t *testing.T) (*fakeHost, *strings.Builder) {
	t.Helper()
	h := &fakeHost{kv: map[string][]byte{}, fail: map[string]uint32{}, calls: map[string]int{}}
	var log strings.Builder
	native.Current, native.Log = h, &log
	alarmHandler, requestHandler, initHandler = nil, nil, nil
	t.Cleanup(func() {
		native.Current, native.Log = nil, nil
		alarmHandler, requestHandler, initHandler = nil, nil, nil
	})
	return h, &log
}

func noopAlarm(time.Time, int) error { return nil }
