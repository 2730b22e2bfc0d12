package node_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
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

// A request net/http refuses before any handler (a path with a malformed
// escape, a header line that is not one) is answered as every other
// error, through ProblemListener: a problem with a code, not net/http's
// text/plain. A request that reads well on the same listener is served
// as before.
func TestRequestsNetHTTPRefusesAreProblemDetails(t *testing.T) {
	t.Parallel()
	n := newNode(t, t.TempDir(), oneshot(t), node.Config{})
	defer n.Close(context.Background())
	srv := httptest.NewUnstartedServer(n.Handler())
	srv.Listener = node.ProblemListener(srv.Listener)
	srv.Start()
	defer srv.Close()
	send := func(raw string) (*http.Response, []byte) {
		t.Helper()
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, raw); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		return resp, body
	}
	for _, raw := range []string{
		"GET /v1/actors/t/oneshot/a%zz/alarm HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /v1/actors/t/oneshot/a/alarm HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n",
	} {
		resp, body := send(raw)
		var p node.Problem
		err := json.Unmarshal(body, &p)
		if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("%q: Content-Type %q, want application/problem+json", raw, ct)
		}
		if err != nil || resp.StatusCode != 400 || p.Status != 400 || p.Code != node.CodeBadRequest || p.Title != "Bad Request" || p.Detail == "" {
			t.Errorf("%q: %d %q (%v), want 400 and a problem with code %q", raw, resp.StatusCode, body, err, node.CodeBadRequest)
		}
	}
	resp, body := send("GET /v1/actors/t/oneshot/a%7Ab/alarm HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"from":"none"`) {
		t.Errorf("a well-formed escape on the same listener: %d %q, want 200 and the alarm state", resp.StatusCode, body)
	}
}
