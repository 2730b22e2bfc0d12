package node_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/node"
)

// Every error of the HTTP API is application/problem+json (RFC 9457) with
// a stable code, the router's own 404 and 405 included: a client decides
// on the status and the code, not on the text.
func TestErrorsAreProblemDetails(t *testing.T) {
	t.Parallel()
	n := newNode(t, t.TempDir(), oneshot(t), node.Config{})
	defer n.Close(context.Background())
	srv := httptest.NewServer(n.Handler())
	defer srv.Close()
	for _, c := range []struct {
		method, path string
		status       int
		code, detail string
	}{
		{"POST", "/v1/actors/t/oneshot/a?kind=later", http.StatusBadRequest, node.CodeBadRequest, `unknown kind "later"`},
		{"POST", "/v1/actors/t/other/a", http.StatusNotFound, node.CodeNotFound, "other"},
		{"GET", "/v1/actors/T/oneshot/a/alarm", http.StatusBadRequest, node.CodeBadRequest, `the tenant "T"`},
		{"PUT", "/v1/actors/t/oneshot/a/alarm", http.StatusBadRequest, node.CodeBadRequest, "set alarm"},
		{"GET", "/v1/nowhere", http.StatusNotFound, node.CodeNotFound, "no route for GET /v1/nowhere"},
		{"PATCH", "/v1/actors/t/oneshot/a", http.StatusMethodNotAllowed, node.CodeMethod, "PATCH"},
	} {
		req, err := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var p node.Problem
		err = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		what := c.method + " " + c.path
		if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("%s: Content-Type %q", what, ct)
		}
		if err != nil || resp.StatusCode != c.status || p.Status != c.status || p.Code != c.code ||
			p.Title != http.StatusText(c.status) || p.Type != "about:blank" || !strings.Contains(p.Detail, c.detail) {
			t.Errorf("%s: %d %+v (%v), want %d, code %q, a detail naming %q", what, resp.StatusCode, p, err, c.status, c.code, c.detail)
		}
		if c.status == http.StatusMethodNotAllowed && resp.Header.Get("Allow") == "" {
			t.Errorf("%s: a 405 without Allow", what)
		}
	}
}

// The alarm state gives each time in RFC 3339 beside its Unix
// milliseconds, the two always the same instant.
func TestAlarmStateGivesRFC3339BesideMilliseconds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := newNode(t, t.TempDir(), oneshot(t), node.Config{})
	defer n.Close(ctx)
	srv := httptest.NewServer(n.Handler())
	defer srv.Close()
	const at = 1_900_000_000_123 // 2030-03-17T17:46:40.123Z
	id := abi.ActorID{Tenant: "t", Class: "oneshot", Name: "a"}
	if _, err := n.Exec(ctx, id, atReq(at), node.Exec); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(srv.URL + "/v1/actors/t/oneshot/a/alarm")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st node.AlarmState
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	parsed, err := time.Parse(time.RFC3339Nano, st.Alarm)
	if st.AlarmMs == nil || *st.AlarmMs != at || err != nil || parsed.UnixMilli() != at || st.Alarm != "2030-03-17T17:46:40.123Z" {
		t.Fatalf("alarm_ms %v, alarm %q (%v): want %d and the same instant in RFC 3339", st.AlarmMs, st.Alarm, err, int64(at))
	}
}
