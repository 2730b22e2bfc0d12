package node_test

// The HTTP API on real servers on 127.0.0.1: routing to the holder from any
// node, names holding '/', and the status codes.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/client"
	"github.com/wasmkeep/alarms/internal/clusterproc"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/node"
)

// served is a cluster node with its HTTP API on a port of 127.0.0.1.
type served struct {
	*node.Node
	URL  string
	srv  *http.Server
	addr string
}

// serveHost starts a cluster node whose advertised address is a real HTTP
// server on 127.0.0.1. Both stop when the test ends.
func serveHost(t *testing.T, b bucket.Bucket, name string, classes map[string][]byte, hc hostConfig) *served {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hc.addr = ln.Addr().String()
	n := startHost(t, b, name, t.TempDir(), classes, hc)
	s := &served{Node: n, URL: "http://" + hc.addr, srv: &http.Server{Handler: n.Handler()}, addr: hc.addr}
	go s.srv.Serve(ln)
	t.Cleanup(func() { s.srv.Close() })
	return s
}

// call sends one HTTP request and returns the status and the body.
func call(t *testing.T, method, u string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, said(t, resp.Header, b)
}

// said is what an answer says: the detail of an error answer, which must
// be application/problem+json (node.Problem, with its status's title and a
// code), or the body of any other.
func said(t testing.TB, h http.Header, body []byte) string {
	t.Helper()
	if h.Get("Content-Type") != "application/problem+json" {
		return string(body)
	}
	var p node.Problem
	if err := json.Unmarshal(body, &p); err != nil || p.Code == "" || p.Title == "" || p.Status == 0 {
		t.Errorf("a problem answer that is not one: %q (%v)", body, err)
		return string(body)
	}
	return p.Detail
}

// A node that does not hold an actor forwards every call to the holder:
// the actor's state is in one place, whichever node a client reaches. A
// name with '/' (sent as %2F) stays one name through the forward.
func TestAnyNodeRoutesToTheHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := s3test.Start(t).Bucket
	classes := counter(t)
	a := serveHost(t, b, "a", classes, hostConfig{})
	bn := serveHost(t, b, "b", classes, hostConfig{})
	id := abi.ActorID{Tenant: "t", Class: "counter", Name: "a/b c?%x"}

	if _, err := clusterproc.ClientOf(a.URL).ExecDurable(ctx, id, []byte("get")); err != nil {
		t.Fatal(err)
	}
	var c counts
	for i, u := range []string{bn.URL, bn.URL, a.URL} {
		out, err := clusterproc.ClientOf(u).Exec(ctx, id, []byte("get"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(out, &c); err != nil || c.Requests != i+2 {
			t.Fatalf("request %d through %s: %s (%v), want %d requests counted in one place", i+2, u, out, err, i+2)
		}
	}
	out, err := clusterproc.ClientOf(bn.URL).ExecDurable(ctx, id, []byte("start 3600000"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &c); err != nil || c.AlarmMs == nil {
		t.Fatalf("start through b: %s (%v)", out, err)
	}
	st, err := clusterproc.ClientOf(bn.URL).Alarm(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Node != "a" || st.AlarmMs == nil || *st.AlarmMs != *c.AlarmMs {
		t.Fatalf("alarm state through b: %+v, want a's answer with the alarm at %d", st, *c.AlarmMs)
	}
	// The name is the exact one, with its '/': the node in process sees the
	// same actor, and b holds nothing.
	if s, err := a.State(ctx, id); err != nil || s.Alarm == nil || *s.Alarm != *c.AlarmMs {
		t.Fatalf("actor %q in process on a: %+v %v", id.Name, s, err)
	}
	a.FlushDeletes(ctx) // the replaced snapshots' DELETEs wait for their batch
	if keys, err := b.List(ctx, "cluster/state/t/counter/", "", 10); err != nil || len(keys) != 1 {
		t.Fatalf("snapshots under the class: %v %v, want one actor's", keys, err)
	}

	// A delete through b reaches a too; the next request starts afresh.
	if err := clusterproc.ClientOf(bn.URL).Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	out, err = clusterproc.ClientOf(bn.URL).ExecDurable(ctx, id, []byte("get"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &c); err != nil || c.Requests != 1 || c.AlarmMs != nil {
		t.Fatalf("after the delete: %s (%v), want a fresh actor", out, err)
	}
}

func TestHTTPStatusCodes(t *testing.T) {
	t.Parallel()
	b := s3test.Start(t).Bucket
	classes := counter(t)
	classes["empty"] = []byte("\x00asm\x01\x00\x00\x00") // a module that exports nothing
	a := serveHost(t, b, "a", classes, hostConfig{})
	actor := a.URL + "/v1/actors/t/counter/x"
	for _, tc := range []struct {
		name, method, url string
		body              []byte
		status            int
		says              string
	}{
		{"an unknown kind", "POST", actor + "?kind=later", nil, 400, `unknown kind "later"`},
		{"a class with a dot", "POST", a.URL + "/v1/actors/t/a.b/x", nil, 400, `the class "a.b" holds '.'`},
		{"a tenant of ..", "POST", a.URL + "/v1/actors/%2E%2E/counter/x", nil, 400, `the tenant ".." does not start with a lowercase letter or a digit`},
		{"an uppercase tenant", "POST", a.URL + "/v1/actors/Acme/counter/x", nil, 400, `the tenant "Acme" does not start with a lowercase letter or a digit`},
		{"a tenant over 63 bytes", "POST", a.URL + "/v1/actors/" + strings.Repeat("t", 64) + "/counter/x", nil, 400, "the tenant is 64 bytes, over the limit of 63 bytes"},
		{"a name over 100 bytes", "POST", a.URL + "/v1/actors/t/counter/" + strings.Repeat("n", 101), nil, 400, "the name is 101 bytes, over the limit of 100 bytes"},
		{"a name of 1,000 bytes", "DELETE", a.URL + "/v1/actors/t/counter/" + strings.Repeat("%2F", 1000), nil, 400, "the name is 1000 bytes, over the limit of 100 bytes"},
		{"a name of 1,000 bytes, state", "GET", a.URL + "/v1/actors/t/counter/" + strings.Repeat("n", 1000) + "/alarm", nil, 400, "over the limit of 100 bytes"},
		{"a name of 100 bytes", "POST", a.URL + "/v1/actors/t/counter/" + strings.Repeat("%FF%2F", 50) + "?kind=exec-durable", []byte("get"), 200, `"requests":1,`},
		{"a class without on-request", "POST", a.URL + "/v1/actors/t/empty/x", nil, 400, `missing export: class empty does not export "on-request"`},
		{"a body over 4 MiB", "POST", actor, make([]byte, node.MaxRequestBody+1), 400, "over 4 MiB"},
		{"a class not served", "POST", a.URL + "/v1/actors/t/nope/x", nil, 404, `class "nope" is not served`},
		{"a class not served, delete", "DELETE", a.URL + "/v1/actors/t/nope/x", nil, 404, `class "nope" is not served`},
		{"the guest failing", "POST", actor, []byte("explode"), 422, "on-request returned 1"},
		{"an exec", "POST", actor + "?kind=exec", []byte("get"), 200, `"requests":1,`},
		{"an exec-durable", "POST", actor + "?kind=exec-durable", []byte("get"), 200, `"requests":2,`},
		{"the alarm state", "GET", actor + "/alarm", nil, 200, `"alarm_ms":null`},
		{"health", "GET", a.URL + "/v1/healthz", nil, 200, "ok"},
		{"a delete", "DELETE", actor, nil, 204, ""},
	} {
		status, body := call(t, tc.method, tc.url, tc.body)
		if status != tc.status || !strings.Contains(body, tc.says) {
			t.Errorf("%s: %d %q, want %d saying %q", tc.name, status, body, tc.status, tc.says)
		}
	}
	// The failed event rolled back: only the two good requests counted
	// (the delete then reset it).
	if status, body := call(t, "POST", actor, []byte("get")); status != 200 || !strings.Contains(body, `"requests":1,`) {
		t.Fatalf("after the delete: %d %q, want a fresh actor", status, body)
	}
}

// While the holder cannot be reached and its lease still stands (its HTTP
// server is gone, its lease renewed), other nodes wait for it for their
// failover wait, then answer 503 with Retry-After naming it: the client
// retries.
func TestAnUnreachableHolderIs503(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := s3test.Start(t).Bucket
	classes := counter(t)
	a := serveHost(t, b, "a", classes, hostConfig{})
	// b waits this long for the holder before its 503; a's lease stays
	// valid (only its HTTP server is gone), so no takeover ends the wait.
	bn := serveHost(t, b, "b", classes, hostConfig{failoverWait: 600 * time.Millisecond})
	id := abi.ActorID{Tenant: "t", Class: "counter", Name: "x"}
	if _, err := clusterproc.ClientOf(a.URL).ExecDurable(ctx, id, nil); err != nil {
		t.Fatal(err)
	}
	a.srv.Close()
	req, _ := http.NewRequest("POST", clusterproc.ActorURL(bn.URL, id), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), a.addr) {
		t.Fatalf("a request while the holder is down: %d %q (Retry-After %q), want 503 naming %s, with Retry-After",
			resp.StatusCode, body, resp.Header.Get("Retry-After"), a.addr)
	}
	var se *client.Problem
	if _, err := clusterproc.ClientOf(bn.URL).Exec(ctx, id, nil); !errors.As(err, &se) || se.Status != 503 {
		t.Fatalf("through the client: %v, want a 503 Problem", err)
	}
}
