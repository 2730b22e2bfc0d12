package node_test

// An operator's control of one alarm over HTTP (PUT and DELETE .../alarm,
// POST .../alarm:fire) on versitygw: each is an event of the holder's,
// committed, indexed and replicated by the rules, through any node.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/client"
	"github.com/wasmkeep/alarms/inspect"
	"github.com/wasmkeep/alarms/internal/clusterproc"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/node"
)

// indexKeys lists the alarm index of tenant t in the bucket, once the
// node's batched DELETEs of replaced entries have gone out.
func indexKeys(t *testing.T, b bucket.Bucket, nodes ...*served) []string {
	t.Helper()
	for _, n := range nodes {
		n.FlushDeletes(context.Background())
	}
	keys, err := b.List(context.Background(), "cluster/alarms/t/", "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// verifyIndex is keepctl verify, once the nodes' batched DELETEs went
// out: every committed alarm has its entry and no entry is extra.
func verifyIndex(t *testing.T, b bucket.Bucket, nodes ...*served) {
	t.Helper()
	for _, n := range nodes {
		n.FlushDeletes(context.Background())
	}
	rep, err := inspect.New(b, "cluster/").Verify(context.Background(), inspect.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || len(rep.Extra) != 0 {
		t.Fatalf("the index does not match the committed alarms: missing %+v, extra %+v", rep.Missing, rep.Extra)
	}
}

// alarmCall makes one call on the actor's alarm and decodes a 200's state.
func alarmCall(t *testing.T, method, u string, body string) (int, node.AlarmState, string) {
	t.Helper()
	status, out := call(t, method, u, []byte(body))
	var st node.AlarmState
	if status == http.StatusOK {
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("%s %s: %q is not an alarm state: %v", method, u, out, err)
		}
	}
	return status, st, out
}

func counterState(t *testing.T, url string) counts {
	t.Helper()
	status, out := call(t, "POST", url, []byte("get"))
	var c counts
	if status != 200 || json.Unmarshal([]byte(out), &c) != nil {
		t.Fatalf("get: %d %q", status, out)
	}
	return c
}

// Set through a node that does not hold the actor: the call is forwarded,
// the holder commits the time (GET reads it back), lists one entry for it
// in the index, and on-alarm runs at that time, after which the entry is
// gone and the index matches the committed state.
func TestAnAlarmSetOverHTTPFiresAtThatTime(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	classes := counter(t)
	a := serveHost(t, srv.Bucket, "a", classes, hostConfig{start: true})
	bn := serveHost(t, srv.Bucket, "b", classes, hostConfig{start: true})
	ctx := context.Background()
	actor := "/v1/actors/t/counter/x"
	id := abi.ActorID{Tenant: "t", Class: "counter", Name: "x"}
	if c := counterState(t, a.URL+actor); c.Requests != 1 || c.Fired != 0 {
		t.Fatalf("a new counter: %+v", c)
	}
	at := time.Now().Add(1500 * time.Millisecond).UnixMilli()
	st, err := clusterproc.ClientOf(bn.URL).SetAlarm(ctx, id, time.UnixMilli(at))
	if err != nil || st.AlarmMs == nil || *st.AlarmMs != at || st.Node != "a" || st.From != node.FromHolder || st.RetryCount != 0 {
		t.Fatalf("PUT through b: %+v (%v), want a's answer with the alarm at %d", st, err, at)
	}
	if got, err := clusterproc.ClientOf(bn.URL).Alarm(ctx, id); err != nil || got.AlarmMs == nil || *got.AlarmMs != at {
		t.Fatalf("GET after the PUT: %+v (%v), want %d", got, err, at)
	}
	keys := indexKeys(t, srv.Bucket, a, bn)
	if len(keys) != 1 || !strings.Contains(keys[0], fmt.Sprintf("/%015d/", at)) {
		t.Fatalf("index after the PUT: %v, want one entry at %d", keys, at)
	}
	verifyIndex(t, srv.Bucket, a, bn)
	waitFor(t, "the alarm set over HTTP to fire", func() bool { return counterState(t, a.URL+actor).Fired == 1 })
	if c := counterState(t, a.URL+actor); c.AlarmMs != nil {
		t.Fatalf("after the firing the counter holds an alarm: %+v", c)
	}
	if keys := indexKeys(t, srv.Bucket, a, bn); len(keys) != 0 {
		t.Fatalf("index after the firing: %v, want empty", keys)
	}
	verifyIndex(t, srv.Bucket, a, bn)

	// The RFC 3339 form sets the same way (the client sends at_ms).
	status, rst, out := alarmCall(t, "PUT", a.URL+actor+"/alarm", `{"at": "2030-01-02T03:04:05.678Z"}`)
	if want := time.Date(2030, 1, 2, 3, 4, 5, 678e6, time.UTC).UnixMilli(); status != 200 || rst.AlarmMs == nil || *rst.AlarmMs != want {
		t.Fatalf("PUT with an RFC 3339 time: %d %q, want %d", status, out, want)
	}
	verifyIndex(t, srv.Bucket, a, bn)
}

// A clear through another node removes the alarm before it is due: it
// never fires, and the index entry is gone from the bucket.
func TestAnAlarmClearedOverHTTPDoesNotFire(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	classes := counter(t)
	a := serveHost(t, srv.Bucket, "a", classes, hostConfig{start: true})
	bn := serveHost(t, srv.Bucket, "b", classes, hostConfig{start: true})
	ctx := context.Background()
	actor := "/v1/actors/t/counter/x"
	id := abi.ActorID{Tenant: "t", Class: "counter", Name: "x"}
	ca, cb := clusterproc.ClientOf(a.URL), clusterproc.ClientOf(bn.URL)
	counterState(t, a.URL+actor)
	due := time.Now().Add(time.Second)
	if _, err := ca.SetAlarm(ctx, id, due); err != nil {
		t.Fatalf("PUT: %v", err)
	}
	if keys := indexKeys(t, srv.Bucket, a, bn); len(keys) != 1 {
		t.Fatalf("index after the PUT: %v, want one entry", keys)
	}
	key := alarms.TimerKey(id)
	if got, ok := a.Timer().Get(key); !ok || got != due.UnixMilli() {
		t.Fatalf("the holder's timer holds %d (%v) after the PUT, want %d", got, ok, due.UnixMilli())
	}
	st, err := cb.ClearAlarm(ctx, id)
	if err != nil || st.AlarmMs != nil || st.Node != "a" {
		t.Fatalf("DELETE through b: %+v (%v), want a's answer with no alarm", st, err)
	}
	if keys := indexKeys(t, srv.Bucket, a, bn); len(keys) != 0 {
		t.Fatalf("index after the clear: %v, want no entry", keys)
	}
	verifyIndex(t, srv.Bucket, a, bn)
	// Past the time it was due, and then some: it did not fire.
	time.Sleep(time.Until(due.Add(1500 * time.Millisecond)))
	if c := counterState(t, a.URL+actor); c.Fired != 0 || c.AlarmMs != nil {
		t.Fatalf("after the cleared alarm's time: %+v, want it not fired", c)
	}
	if _, ok := a.Timer().Get(key); ok {
		t.Fatal("the holder's timer still holds the cleared alarm")
	}

	// A clear that names the time the alarm is at clears it; one that
	// names another is a 409 and clears nothing.
	at := time.Now().Add(time.Hour).UnixMilli()
	if _, err := ca.SetAlarm(ctx, id, time.UnixMilli(at)); err != nil {
		t.Fatal(err)
	}
	var p *client.Problem
	if _, err := cb.ClearAlarmAt(ctx, id, at+1); !errors.As(err, &p) || p.Status != 409 || p.Code != client.CodeAlarmMoved ||
		!strings.Contains(p.Detail, "t/counter/x") || !strings.Contains(p.Detail, fmt.Sprint(at)) {
		t.Fatalf("a clear naming another time: %v, want 409 alarm_moved naming the actor and the committed alarm", err)
	}
	if got, err := ca.Alarm(ctx, id); err != nil || got.AlarmMs == nil || *got.AlarmMs != at {
		t.Fatalf("after the refused clear: %+v (%v), want the alarm still at %d", got, err, at)
	}
	if st, err := cb.ClearAlarmAt(ctx, id, at); err != nil || st.AlarmMs != nil {
		t.Fatalf("a clear naming the committed time: %+v (%v)", st, err)
	}
	verifyIndex(t, srv.Bucket, a, bn)
}

// Fire runs on-alarm now, through any node, whatever time the alarm was
// set for; a guest whose on-alarm fails gets its retry committed and
// indexed, and the answer says why it failed.
func TestFireRunsOnAlarmNow(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	classes := counter(t)
	for k, v := range scripted(t) {
		classes[k] = v
	}
	a := serveHost(t, srv.Bucket, "a", classes, hostConfig{start: true})
	bn := serveHost(t, srv.Bucket, "b", classes, hostConfig{start: true})
	ctx := context.Background()
	actor := "/v1/actors/t/counter/x"
	id := abi.ActorID{Tenant: "t", Class: "counter", Name: "x"}
	ca, cb := clusterproc.ClientOf(a.URL), clusterproc.ClientOf(bn.URL)
	counterState(t, a.URL+actor)
	later := time.Now().Add(time.Hour).UnixMilli()
	if _, err := ca.SetAlarm(ctx, id, time.UnixMilli(later)); err != nil {
		t.Fatal(err)
	}
	before := time.Now().UnixMilli()
	st, err := cb.FireAlarm(ctx, id)
	if err != nil || st.Fired == nil || !st.Fired.Ran || st.Fired.Error != "" || st.Fired.ScheduledMs < before || st.AlarmMs != nil || st.Node != "a" {
		t.Fatalf("fire through b: %+v (%v), want on-alarm run on a just now, leaving no alarm", st, err)
	}
	if c := counterState(t, a.URL+actor); c.Fired != 1 {
		t.Fatalf("after the fire: %+v, want one firing", c)
	}
	if keys := indexKeys(t, srv.Bucket, a, bn); len(keys) != 0 {
		t.Fatalf("index after the fire: %v, want the hour's entry gone", keys)
	}
	verifyIndex(t, srv.Bucket, a, bn)
	// A counter that re-arms: on-alarm sets the next alarm, indexed.
	if _, err := ca.Exec(ctx, id, []byte("start 3600000")); err != nil {
		t.Fatal(err)
	}
	st, err = ca.FireAlarm(ctx, id)
	if err != nil || st.Fired == nil || !st.Fired.Ran || st.AlarmMs == nil || *st.AlarmMs < st.Fired.ScheduledMs+3_600_000 {
		t.Fatalf("fire of a counter that re-arms: %+v (%v), want its next alarm an hour on", st, err)
	}
	if keys := indexKeys(t, srv.Bucket, a, bn); len(keys) != 1 || !strings.Contains(keys[0], fmt.Sprintf("/%015d/", *st.AlarmMs)) {
		t.Fatalf("index after the re-arming fire: %v, want one entry at %d", keys, *st.AlarmMs)
	}
	verifyIndex(t, srv.Bucket, a, bn)

	// A failing on-alarm: its retry is committed a second on, and indexed.
	sid := abi.ActorID{Tenant: "t", Class: "s", Name: "y"}
	if _, err := ca.Exec(ctx, sid, []byte("mode fail")); err != nil {
		t.Fatalf("mode fail: %v", err)
	}
	st, err = cb.FireAlarm(ctx, sid)
	if err != nil || st.Fired == nil || !st.Fired.Ran || !strings.Contains(st.Fired.Error, "failing on alarm") || st.RetryCount != 1 || st.AlarmMs == nil || *st.AlarmMs < st.Fired.ScheduledMs+1000 {
		t.Fatalf("fire of a failing on-alarm: %+v (%v), want the error and a retry 1 s on", st, err)
	}
	verifyIndex(t, srv.Bucket, a, bn)
	// Setting from outside resets the retry count.
	if st, err := ca.SetAlarm(ctx, sid, time.UnixMilli(later)); err != nil || st.RetryCount != 0 {
		t.Fatalf("PUT after a failure: %+v (%v), want retry count 0", st, err)
	}
	verifyIndex(t, srv.Bucket, a, bn)
}

// What the API refuses it refuses with a status that says whose fault it
// is and a message naming the actor and the cause; nothing changes.
func TestAlarmCallsRefuseBadInput(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	a := serveHost(t, srv.Bucket, "a", counter(t), hostConfig{})
	actor := a.URL + "/v1/actors/t/counter/x"
	counterState(t, actor)
	at := time.Now().Add(time.Hour).UnixMilli()
	if status, _, out := alarmCall(t, "PUT", actor+"/alarm", fmt.Sprintf(`{"at_ms": %d}`, at)); status != 200 {
		t.Fatalf("PUT: %d %q", status, out)
	}
	keys := indexKeys(t, srv.Bucket, a)
	for _, tc := range []struct {
		name, method, url, body string
		status                  int
		says                    string
	}{
		{"not JSON", "PUT", actor + "/alarm", `at 5`, 400, `is not {"at_ms": N} or {"at": "RFC 3339"}`},
		{"an empty body", "PUT", actor + "/alarm", ``, 400, `is not {"at_ms": N}`},
		{"no time", "PUT", actor + "/alarm", `{}`, 400, "gives no time"},
		{"both times", "PUT", actor + "/alarm", `{"at_ms": 5, "at": "2030-01-01T00:00:00Z"}`, 400, `both "at_ms" and "at"`},
		{"an unknown field", "PUT", actor + "/alarm", `{"at_ms": 5, "when": 6}`, 400, `unknown field "when"`},
		{"a string for at_ms", "PUT", actor + "/alarm", `{"at_ms": "5"}`, 400, "at_ms"},
		{"a fraction of a ms", "PUT", actor + "/alarm", `{"at_ms": 5.5}`, 400, "at_ms"},
		{"two values", "PUT", actor + "/alarm", `{"at_ms": 5} {"at_ms": 6}`, 400, "more than one JSON value"},
		{"a bad RFC 3339 time", "PUT", actor + "/alarm", `{"at": "tomorrow"}`, 400, `"at" "tomorrow" is not an RFC 3339 time`},
		{"a time before 1970", "PUT", actor + "/alarm", `{"at_ms": -1}`, 400, "alarm time -1 is outside 0..999999999999999"},
		{"a time before 1970, RFC 3339", "PUT", actor + "/alarm", `{"at": "1969-12-31T23:59:59Z"}`, 400, "alarm time -1000 is outside"},
		{"a time past the index's", "PUT", actor + "/alarm", fmt.Sprintf(`{"at_ms": %d}`, alarmindex.MaxDueMs+1), 400, "is outside 0..999999999999999"},
		{"a body over 4 KiB", "PUT", actor + "/alarm", `{"at_ms": 5` + strings.Repeat(" ", 5000) + `}`, 400, "over 4096 bytes"},
		{"a bad if_at_ms", "DELETE", actor + "/alarm?if_at_ms=soon", ``, 400, `if_at_ms "soon" is not Unix milliseconds`},
		{"an actor that does not exist, set", "PUT", a.URL + "/v1/actors/t/counter/nobody/alarm", `{"at_ms": 5}`, 404, "actor t/counter/nobody: the actor does not exist"},
		{"an actor that does not exist, clear", "DELETE", a.URL + "/v1/actors/t/counter/nobody/alarm", ``, 404, "actor t/counter/nobody: the actor does not exist"},
		{"an actor that does not exist, fire", "POST", a.URL + "/v1/actors/t/counter/nobody/alarm:fire", ``, 404, "actor t/counter/nobody: the actor does not exist"},
		{"a class not served", "PUT", a.URL + "/v1/actors/t/nope/x/alarm", `{"at_ms": 5}`, 404, `class "nope" is not served`},
		{"a bad tenant", "POST", a.URL + "/v1/actors/T/counter/x/alarm:fire", ``, 400, `the tenant "T"`},
		{"another method", "PATCH", actor + "/alarm", `{"at_ms": 5}`, 405, ""},
		{"an offer that is not JSON", "POST", actor + "/alarm:offer", `at 5`, 400, `actor t/counter/x: offer an index entry: the body is not {"at_ms": N}`},
		{"an offer with no time", "POST", actor + "/alarm:offer", `{}`, 400, `needs "at_ms", a positive time`},
		{"an offer with an unknown field", "POST", actor + "/alarm:offer", `{"at_ms": 5, "keys": []}`, 400, `unknown field "keys"`},
		{"an offer over 4 KiB", "POST", actor + "/alarm:offer", `{"at_ms": 5` + strings.Repeat(" ", 5000) + `}`, 400, "over 4096 bytes"},
	} {
		status, out := call(t, tc.method, tc.url, []byte(tc.body))
		if status != tc.status || !strings.Contains(out, tc.says) {
			t.Errorf("%s: %d %q, want %d saying %q", tc.name, status, out, tc.status, tc.says)
		}
		if tc.status == 400 && tc.url == actor+"/alarm" && !strings.Contains(out, "actor t/counter/x") {
			t.Errorf("%s: %q does not name the actor", tc.name, out)
		}
	}
	if _, st, _ := alarmCall(t, "GET", actor+"/alarm", ""); st.AlarmMs == nil || *st.AlarmMs != at {
		t.Fatalf("after the refused calls: %+v, want the alarm still at %d", st, at)
	}
	if after := indexKeys(t, srv.Bucket, a); strings.Join(after, " ") != strings.Join(keys, " ") {
		t.Fatalf("the refused calls changed the index: %v, then %v", keys, after)
	}
}

// A tenant's token sets, clears and fires its own tenant's alarms only;
// another tenant's are a 403 and stay as they were.
func TestATenantTokenControlsOnlyItsOwnAlarms(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	u := secureNode(t, srv.Bucket, "a", counter(t), node.Security{
		Token:        "operator-secret",
		TenantTokens: map[string]string{"t": "tenant-t-secret", "u": "tenant-u-secret"},
	}, nil, nil)
	ctx := context.Background()
	operator := clusterproc.ClientOf(u, client.WithToken("operator-secret"))
	at := time.UnixMilli(time.Now().Add(time.Hour).UnixMilli())
	idT, idU := abi.ActorID{Tenant: "t", Class: "counter", Name: "x"}, abi.ActorID{Tenant: "u", Class: "counter", Name: "x"}
	for _, id := range []abi.ActorID{idT, idU} {
		if _, err := operator.Exec(ctx, id, []byte("get")); err != nil {
			t.Fatalf("create %s: %v", id, err)
		}
		if _, err := operator.SetAlarm(ctx, id, at); err != nil {
			t.Fatalf("the operator's PUT on %s: %v", id, err)
		}
	}
	tenantT := clusterproc.ClientOf(u, client.WithToken("tenant-t-secret"))
	anonymous := clusterproc.ClientOf(u)
	for _, call := range []struct {
		name string
		do   func(c *client.Client) (client.AlarmState, error)
	}{
		{"PUT", func(c *client.Client) (client.AlarmState, error) { return c.SetAlarm(ctx, idU, at) }},
		{"DELETE", func(c *client.Client) (client.AlarmState, error) { return c.ClearAlarm(ctx, idU) }},
		{"POST :fire", func(c *client.Client) (client.AlarmState, error) { return c.FireAlarm(ctx, idU) }},
	} {
		var p *client.Problem
		if _, err := call.do(tenantT); !errors.As(err, &p) || p.Status != 403 || p.Code != client.CodeForbidden ||
			!strings.Contains(p.Detail, `the token of tenant "t" does not reach tenant "u"`) {
			t.Errorf("%s on u's alarm with t's token: %v, want 403", call.name, err)
		}
		if _, err := call.do(anonymous); !client.IsCode(err, client.CodeUnauthorized) {
			t.Errorf("%s on u's alarm with no token: %v, want 401", call.name, err)
		}
	}
	st, err := clusterproc.ClientOf(u, client.WithToken("tenant-u-secret")).Alarm(ctx, idU)
	if err != nil || st.AlarmMs == nil || *st.AlarmMs != at.UnixMilli() {
		t.Fatalf("u's alarm after the refused calls: %+v (%v), want it still at %d", st, err, at.UnixMilli())
	}
	// t's own token reaches t's alarm.
	if st, err := tenantT.ClearAlarm(ctx, idT); err != nil || st.AlarmMs != nil {
		t.Fatalf("t's token on t's alarm: %+v (%v)", st, err)
	}
	if st, err := tenantT.FireAlarm(ctx, idT); err != nil || st.Fired == nil || !st.Fired.Ran {
		t.Fatalf("t's token firing t's alarm: %+v (%v)", st, err)
	}
}
