//go:build !wasip1

package wasmkeep

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/guest-sdk/internal/native"
)

func TestSetAlarmSendsMillisRoundedUp(t *testing.T) {
	h, _ := withHost(t)
	HandleAlarm(noopAlarm)
	at := time.UnixMilli(1_700_000_000_000).Add(300 * time.Microsecond)
	if err := SetAlarm(at); err != nil {
		t.Fatal(err)
	}
	if len(h.setTimes) != 1 || h.setTimes[0] != 1_700_000_000_001 {
		t.Fatalf("host got %v, want [1700000000001]", h.setTimes)
	}
	got, err := GetAlarm()
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equal(time.UnixMilli(1_700_000_000_001)) || got.Location() != time.UTC {
		t.Errorf("GetAlarm = %v, want 1700000000001 ms in UTC", got)
	}
}

func TestSetAlarmWithoutHandlerIsRefusedBeforeTheHost(t *testing.T) {
	h, _ := withHost(t)
	if err := SetAlarm(time.UnixMilli(1000)); !errors.Is(err, ErrNoAlarmHandler) {
		t.Fatalf("SetAlarm without HandleAlarm = %v, want ErrNoAlarmHandler", err)
	}
	if h.calls["set-alarm"] != 0 {
		t.Errorf("set-alarm reached the host %d times", h.calls["set-alarm"])
	}
}

func TestSetAlarmOutOfRangeReturnsTheHostsEINVAL(t *testing.T) {
	h, _ := withHost(t)
	HandleAlarm(noopAlarm)
	for _, at := range []time.Time{time.UnixMilli(-1), time.UnixMilli(maxAlarmMillis + 1), {}} {
		err := SetAlarm(at)
		if !errors.Is(err, EINVAL) || !strings.Contains(err.Error(), "set-alarm") {
			t.Errorf("SetAlarm(%v) = %v, want set-alarm EINVAL", at, err)
		}
	}
	if h.alarm != nil {
		t.Errorf("an alarm was set at %d", *h.alarm)
	}
}

func TestGetAlarm(t *testing.T) {
	h, _ := withHost(t)
	if _, err := GetAlarm(); err != ErrNotSet {
		t.Fatalf("GetAlarm with none set = %v, want ErrNotSet", err)
	}
	h.fail["get-alarm"] = uint32(EIO)
	_, err := GetAlarm()
	var he *HostError
	if !errors.As(err, &he) || he.Errno != EIO || he.Op != "get-alarm" {
		t.Fatalf("GetAlarm on a failing host = %v, want get-alarm EIO", err)
	}
}

func TestClearAlarm(t *testing.T) {
	h, _ := withHost(t)
	HandleAlarm(noopAlarm)
	if err := SetAlarm(time.UnixMilli(9000)); err != nil {
		t.Fatal(err)
	}
	if err := ClearAlarm(); err != nil {
		t.Fatal(err)
	}
	if _, err := GetAlarm(); err != ErrNotSet {
		t.Fatalf("GetAlarm after ClearAlarm = %v, want ErrNotSet", err)
	}
	h.fail["clear-alarm"] = uint32(EIO)
	if err := ClearAlarm(); !errors.Is(err, EIO) {
		t.Fatalf("ClearAlarm on a failing host = %v, want EIO", err)
	}
}

func TestWithoutAHostEveryCallIsEPERM(t *testing.T) {
	withHost(t)
	native.Current = nil
	HandleAlarm(noopAlarm)
	_, getAlarmErr := GetAlarm()
	_, getErr := Get("k")
	for name, err := range map[string]error{
		"SetAlarm":   SetAlarm(time.UnixMilli(1)),
		"GetAlarm":   getAlarmErr,
		"ClearAlarm": ClearAlarm(),
		"Get":        getErr,
		"Put":        Put("k", []byte("v")),
		"Delete":     Delete("k"),
	} {
		if !errors.Is(err, EPERM) {
			t.Errorf("%s without a host = %v, want EPERM", name, err)
		}
	}
}

func TestGetReturnsValuesOfAnyLength(t *testing.T) {
	h, _ := withHost(t)
	long := bytes.Repeat([]byte("0123456789"), 1000)
	h.kv["short"] = []byte("hello")
	h.kv["exact"] = bytes.Repeat([]byte("x"), getBufSize)
	h.kv["long"] = long
	h.kv["empty"] = []byte{}
	tests := []struct {
		key   string
		want  []byte
		calls int
	}{
		{"short", []byte("hello"), 1},
		{"exact", h.kv["exact"], 1},
		{"long", long, 2},
		{"empty", []byte{}, 1},
	}
	for _, tt := range tests {
		h.calls["kv-get"] = 0
		got, err := Get(tt.key)
		if err != nil {
			t.Errorf("Get(%q): %v", tt.key, err)
			continue
		}
		if !bytes.Equal(got, tt.want) || got == nil {
			t.Errorf("Get(%q) = %d bytes %q..., want %d bytes", tt.key, len(got), got[:min(len(got), 10)], len(tt.want))
		}
		if h.calls["kv-get"] != tt.calls {
			t.Errorf("Get(%q) made %d kv-get calls, want %d", tt.key, h.calls["kv-get"], tt.calls)
		}
	}
	// The caller owns the slice: appending must not reach past the value.
	got, _ := Get("short")
	if cap(got) != len(got) {
		t.Errorf("Get returned cap %d for len %d", cap(got), len(got))
	}
}

func TestGetMissingAndFailing(t *testing.T) {
	h, _ := withHost(t)
	if _, err := Get("nope"); err != ErrNotFound {
		t.Fatalf("Get of a missing key = %v, want ErrNotFound", err)
	}
	h.fail["kv-get"] = uint32(EIO)
	if _, err := Get("nope"); !errors.Is(err, EIO) || errors.Is(err, ErrNotFound) {
		t.Fatalf("Get on a failing host = %v, want EIO", err)
	}
}

// growingHost reports a longer value on every call, as no real host does
// within an event; Get must give up rather than loop.
type growingHost struct {
	fakeHost
	n uint32
}

func (h *growingHost) KVGet(key string, buf []byte, outLen *uint32) uint32 {
	h.calls["kv-get"]++
	h.n += 1000
	*outLen = h.n
	return 0
}

func TestGetGivesUpOnAValueThatKeepsGrowing(t *testing.T) {
	withHost(t)
	g := &growingHost{fakeHost: fakeHost{calls: map[string]int{}}}
	native.Current = g
	if _, err := Get("k"); err == nil {
		t.Fatal("Get returned no error")
	}
	if g.calls["kv-get"] != 3 {
		t.Errorf("kv-get called %d times, want 3", g.calls["kv-get"])
	}
}

func TestPutAndDelete(t *testing.T) {
	h, _ := withHost(t)
	val := []byte("v1")
	if err := Put("k", val); err != nil {
		t.Fatal(err)
	}
	val[0] = 'X' // the host copied it
	if got := string(h.kv["k"]); got != "v1" {
		t.Fatalf("host holds %q, want v1", got)
	}
	if err := Put("", nil); err != nil {
		t.Fatalf("Put of an empty key and nil value: %v", err)
	}
	if err := Put(strings.Repeat("k", 1025), nil); !errors.Is(err, E2BIG) {
		t.Fatalf("Put of a long key = %v, want E2BIG", err)
	}
	if err := Delete("k"); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.kv["k"]; ok {
		t.Fatal("Delete left the value")
	}
	h.fail["kv-delete"] = uint32(ENOENT)
	if err := Delete("k"); err != nil {
		t.Fatalf("Delete of a missing key = %v, want nil", err)
	}
	h.fail["kv-delete"] = uint32(EIO)
	if err := Delete("k"); !errors.Is(err, EIO) {
		t.Fatalf("Delete on a failing host = %v, want EIO", err)
	}
}

func TestOnRequest(t *testing.T) {
	h, log := withHost(t)
	h.req = []byte("ping")
	var got []byte
	HandleRequest(func(req []byte) ([]byte, error) {
		got = bytes.Clone(req)
		return []byte("pong"), nil
	})
	if rc := onRequest(int32(len(h.req))); rc != 0 {
		t.Fatalf("on-request = %d, want 0; log %q", rc, log)
	}
	if string(got) != "ping" || string(h.resp) != "pong" {
		t.Fatalf("handler got %q, host got response %q", got, h.resp)
	}
	if h.calls["request-read"] != 1 || h.calls["response-write"] != 1 {
		t.Errorf("calls %v, want one request-read and one response-write", h.calls)
	}
}

func TestOnRequestEmpty(t *testing.T) {
	h, _ := withHost(t)
	called := false
	HandleRequest(func(req []byte) ([]byte, error) {
		called = true
		if len(req) != 0 {
			t.Errorf("handler got %q, want empty", req)
		}
		return nil, nil
	})
	if rc := onRequest(0); rc != 0 || !called {
		t.Fatalf("on-request(0) = %d, handler called %v", rc, called)
	}
	if h.calls["request-read"] != 0 || h.calls["response-write"] != 0 {
		t.Errorf("calls %v, want none for an empty request and response", h.calls)
	}
}

func TestOnRequestFailures(t *testing.T) {
	tests := []struct {
		name    string
		handler func([]byte) ([]byte, error)
		fail    string
		reqLen  int32
		logHas  string
	}{
		{"no handler", nil, "", 1, "no request handler"},
		{"handler error", func([]byte) ([]byte, error) { return []byte("partial"), errors.New("boom") }, "", 1, "boom"},
		{"request-read fails", func([]byte) ([]byte, error) { return nil, nil }, "request-read", 1, "request-read: EIO"},
		{"response-write fails", func([]byte) ([]byte, error) { return []byte("r"), nil }, "response-write", 1, "response-write: EIO"},
		{"negative length", func([]byte) ([]byte, error) { return nil, nil }, "", -1, "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, log := withHost(t)
			h.req = []byte("x")
			if tt.fail != "" {
				h.fail[tt.fail] = uint32(EIO)
			}
			HandleRequest(tt.handler)
			if rc := onRequest(tt.reqLen); rc == 0 {
				t.Fatal("on-request = 0, want failure")
			}
			if len(h.resp) != 0 {
				t.Errorf("response %q written by a failed event", h.resp)
			}
			if !strings.Contains(log.String(), tt.logHas) {
				t.Errorf("log %q, want it to contain %q", log, tt.logHas)
			}
		})
	}
}

func TestOnAlarm(t *testing.T) {
	_, log := withHost(t)
	var gotAt time.Time
	var gotRetry int
	HandleAlarm(func(at time.Time, retry int) error {
		gotAt, gotRetry = at, retry
		if retry > 2 {
			return errors.New("still broken")
		}
		return nil
	})
	if rc := onAlarm(1_700_000_000_123, 2); rc != 0 {
		t.Fatalf("on-alarm = %d, want 0", rc)
	}
	if !gotAt.Equal(time.UnixMilli(1_700_000_000_123)) || gotRetry != 2 {
		t.Fatalf("handler got (%v, %d)", gotAt, gotRetry)
	}
	if rc := onAlarm(5, 3); rc == 0 {
		t.Fatal("on-alarm with a failing handler = 0")
	}
	if !strings.Contains(log.String(), "on-alarm: still broken") {
		t.Errorf("log %q", log)
	}
}

func TestOnAlarmWithoutHandlerDropsTheAlarm(t *testing.T) {
	_, log := withHost(t)
	if rc := onAlarm(1000, 0); rc != 0 {
		t.Fatalf("on-alarm without a handler = %d, want 0 (handled, dropped)", rc)
	}
	if !strings.Contains(log.String(), "no alarm handler") {
		t.Errorf("log %q, want a line saying the alarm was dropped", log)
	}
}

func TestOnInit(t *testing.T) {
	_, log := withHost(t)
	if rc := onInit(); rc != 0 {
		t.Fatalf("on-init without a handler = %d, want 0", rc)
	}
	ran := 0
	HandleInit(func() error { ran++; return nil })
	if rc := onInit(); rc != 0 || ran != 1 {
		t.Fatalf("on-init = %d, handler ran %d times", rc, ran)
	}
	HandleInit(func() error { return errors.New("no disk") })
	if rc := onInit(); rc == 0 {
		t.Fatal("on-init with a failing handler = 0")
	}
	if !strings.Contains(log.String(), "on-init: no disk") {
		t.Errorf("log %q", log)
	}
}
