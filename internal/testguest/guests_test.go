package testguest_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// The Go guests' behaviour on the fake host: what host tests and the demo
// rely on.

func TestGoGuestCallsNothingDuringInitialize(t *testing.T) {
	for _, dir := range []string{testguest.CounterActor, testguest.Scripted} {
		h := newHost(t, testguest.Build(t, dir))
		if len(h.calls) != 0 {
			t.Errorf("%s: _initialize called %q", dir, h.calls)
		}
	}
}

func TestScriptedRequests(t *testing.T) {
	h := newHost(t, testguest.Build(t, testguest.Scripted))
	steps := []struct{ req, resp string }{
		{"init?", "no"},
		{"get", "none"},
		{"set 5000", "ok"},
		{"get", "5000"},
		{"set -1", "wasmkeep: set-alarm: EINVAL (invalid argument)"},
		{"set 1000000000000000", "wasmkeep: set-alarm: EINVAL (invalid argument)"},
		{"get", "5000"},
		{"clear", "ok"},
		{"get", "none"},
		{"getkv k", "none"},
		{"put k two words", "ok"},
		{"getkv k", "two words"},
		{"put big " + strings.Repeat("v", 1000), "ok"},
		{"getkv big", strings.Repeat("v", 1000)},
		{"mode set:9000,fail", "ok"},
		{"getkv mode", "set:9000,fail"},
		{"calls", "0"},
		{"self", "t/c/fake"},
	}
	for _, s := range steps {
		if got := h.mustRequest(s.req); got != s.resp {
			t.Errorf("request %q = %q, want %q", s.req, got, s.resp)
		}
	}
}

func TestScriptedInit(t *testing.T) {
	h := newHost(t, testguest.Build(t, testguest.Scripted))
	if code, err := h.event(eventDeadline, abi.ExportOnInit); err != nil || code != 0 {
		t.Fatalf("on-init = %d, %v", code, err)
	}
	if h.kv["inited"] != "1" {
		t.Errorf("on-init left inited = %q", h.kv["inited"])
	}
	if got := h.mustRequest("init?"); got != "yes" {
		t.Errorf("init? = %q after on-init", got)
	}
}

func TestScriptedFailRollsBack(t *testing.T) {
	h := newHost(t, testguest.Build(t, testguest.Scripted))
	if _, code := h.request("fail"); code == 0 {
		t.Fatal("request fail succeeded")
	}
	if !hasCallPrefix(h.calls, "kv-put(") {
		t.Errorf("fail did not put before failing: %q", h.calls)
	}
	if _, ok := h.kv["x"]; ok {
		t.Error("x survived the failed request")
	}
	if !strings.Contains(h.stderr.String(), "failing on request") {
		t.Errorf("stderr %q, want the error", h.stderr.String())
	}
	if _, code := h.request("bogus"); code == 0 {
		t.Error("an unknown command succeeded")
	}
}

func hasCallPrefix(calls []string, prefix string) bool {
	for _, c := range calls {
		if strings.HasPrefix(c, prefix) {
			return true
		}
	}
	return false
}

func TestScriptedAlarmModes(t *testing.T) {
	tests := []struct {
		mode    string
		fails   bool
		alarm   int64 // the alarm after a success; -1 for none
		setCall string
	}{
		{"", false, -1, ""},
		{"ok", false, -1, ""},
		{"fail", true, 0, ""},
		{"set:9000", false, 9000, "set-alarm(9000)=0"},
		{"set:9000,fail", true, 0, "set-alarm(9000)=0"},
		{"clear,fail", true, 0, "clear-alarm()=0"},
		{"clear", false, -1, "clear-alarm()=0"},
	}
	for _, tt := range tests {
		t.Run("mode="+tt.mode, func(t *testing.T) {
			h := newHost(t, testguest.Build(t, testguest.Scripted))
			if tt.mode != "" {
				h.mustRequest("mode " + tt.mode)
			}
			h.mustRequest("set 4000")
			h.calls = nil
			_, code, err := h.fire(eventDeadline)
			if err != nil {
				t.Fatalf("on-alarm trapped: %v", err)
			}
			if (code != 0) != tt.fails {
				t.Fatalf("on-alarm = %d, want failure %v", code, tt.fails)
			}
			if tt.setCall != "" && !slices.Contains(h.calls, tt.setCall) {
				t.Errorf("calls %q, want %s", h.calls, tt.setCall)
			}
			if got := h.mustRequest("calls"); got != "1" {
				t.Errorf("calls = %q, want 1", got)
			}
			log := h.mustRequest("getkv log")
			if tt.fails {
				// Rolled back with the rest of the event.
				if log != "none" || h.alarm == nil || *h.alarm != 4000 {
					t.Errorf("after a failed run: log %q, alarm %v; want none and 4000", log, h.alarm)
				}
				return
			}
			if log != "4000:0" {
				t.Errorf("log %q, want 4000:0", log)
			}
			if (h.alarm == nil) != (tt.alarm == -1) || (h.alarm != nil && *h.alarm != tt.alarm) {
				t.Errorf("alarm %v, want %d", h.alarm, tt.alarm)
			}
		})
	}
}

func TestScriptedLogAppendsAndCountsRetries(t *testing.T) {
	h := newHost(t, testguest.Build(t, testguest.Scripted))
	h.mustRequest("mode fail")
	h.mustRequest("set 4000")
	for range 2 {
		if _, code, err := h.fire(eventDeadline); err != nil || code == 0 {
			t.Fatalf("on-alarm = %d, %v; want a failure", code, err)
		}
	}
	h.mustRequest("mode set:8000")
	if _, code, err := h.fire(eventDeadline); err != nil || code != 0 {
		t.Fatalf("on-alarm = %d, %v", code, err)
	}
	if _, code, err := h.fire(eventDeadline); err != nil || code != 0 {
		t.Fatalf("on-alarm = %d, %v", code, err)
	}
	// Two failed runs left no entry; the third saw retry count 2.
	if got := h.mustRequest("getkv log"); got != "4000:2 8000:0" {
		t.Errorf("log %q, want \"4000:2 8000:0\"", got)
	}
	if got := h.mustRequest("calls"); got != "4" {
		t.Errorf("calls %q, want 4", got)
	}
}

func TestScriptedPanicTraps(t *testing.T) {
	h := newHost(t, testguest.Build(t, testguest.Scripted))
	h.mustRequest("mode panic")
	h.mustRequest("set 4000")
	_, _, err := h.fire(eventDeadline)
	if err == nil {
		t.Fatal("on-alarm in mode panic returned instead of trapping")
	}
	if !strings.Contains(h.stderr.String(), "panicking on alarm") {
		t.Errorf("stderr %q, want the panic message", h.stderr.String())
	}
}

// counterState is the counter actor's JSON answer.
type counterState struct {
	Requests   int64  `json:"requests"`
	Fired      int64  `json:"fired"`
	AlarmMs    *int64 `json:"alarm_ms"`
	IntervalMs int64  `json:"interval_ms"`
}

func counter(t *testing.T, h *fakeHost, req string) counterState {
	t.Helper()
	resp := h.mustRequest(req)
	var s counterState
	dec := json.NewDecoder(strings.NewReader(resp))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("request %q: response %q: %v", req, resp, err)
	}
	return s
}

func ms(v int64) *int64 { return &v }

func sameState(a, b counterState) bool {
	if (a.AlarmMs == nil) != (b.AlarmMs == nil) || (a.AlarmMs != nil && *a.AlarmMs != *b.AlarmMs) {
		return false
	}
	return a.Requests == b.Requests && a.Fired == b.Fired && a.IntervalMs == b.IntervalMs
}

func TestCounterActor(t *testing.T) {
	h := newHost(t, testguest.Build(t, testguest.CounterActor))
	t0 := h.nowMs
	check := func(req string, want counterState) {
		t.Helper()
		if got := counter(t, h, req); !sameState(got, want) {
			t.Errorf("request %q = %+v (alarm %v), want %+v (alarm %v)", req, got, got.AlarmMs, want, want.AlarmMs)
		}
	}
	if got := h.mustRequest(""); got != `{"requests":1,"fired":0,"alarm_ms":null,"interval_ms":0}` {
		t.Errorf("empty request = %s", got)
	}
	check("get", counterState{Requests: 2})
	check("start 60000", counterState{Requests: 3, AlarmMs: ms(t0 + 60_000), IntervalMs: 60_000})

	// On time: re-armed one interval after the scheduled time.
	h.nowMs = t0 + 60_005
	if at, code, err := h.fire(eventDeadline); err != nil || code != 0 || at != t0+60_000 {
		t.Fatalf("on-alarm at %d = %d, %v", at, code, err)
	}
	check("get", counterState{Requests: 4, Fired: 1, AlarmMs: ms(t0 + 120_000), IntervalMs: 60_000})

	// Late by more than an interval: re-armed one interval from now.
	h.nowMs = t0 + 300_000
	if _, code, err := h.fire(eventDeadline); err != nil || code != 0 {
		t.Fatalf("on-alarm = %d, %v", code, err)
	}
	check("get", counterState{Requests: 5, Fired: 2, AlarmMs: ms(t0 + 360_000), IntervalMs: 60_000})

	// A bad command fails and is not counted.
	for _, bad := range []string{"start", "start 0", "start x", "jump"} {
		if _, code := h.request(bad); code == 0 {
			t.Errorf("request %q succeeded", bad)
		}
	}
	check("stop", counterState{Requests: 6, Fired: 2})

	// An alarm that fires once stopped counts and does not re-arm.
	h.mustRequest("start 1000")
	h.nowMs += 1000
	if _, code, err := h.fire(eventDeadline); err != nil || code != 0 {
		t.Fatalf("on-alarm = %d, %v", code, err)
	}
	h.mustRequest("stop")
	h.alarm = ms(h.nowMs) // as if it was delivered after all
	if _, code, err := h.fire(eventDeadline); err != nil || code != 0 {
		t.Fatalf("on-alarm = %d, %v", code, err)
	}
	check("get", counterState{Requests: 9, Fired: 4})
	for _, k := range []string{"requests", "fired"} {
		if _, ok := h.kv[k]; !ok {
			t.Errorf("counter %q not stored in KV", k)
		}
	}
}
