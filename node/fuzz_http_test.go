package node_test

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

// documented are the status codes node/http.go lists, with those of the
// request router itself (301 or 307 to a cleaned path, 404 for an unknown path,
// 405 for a method a path does not take).
var documented = map[int]bool{200: true, 204: true, 301: true, 307: true, 400: true, 401: true, 403: true, 404: true, 405: true, 422: true, 503: true}

// FuzzHTTPHandler sends any request the server would parse (method, path
// and query, a token or none, a body) to a cluster node that checks
// tokens: the handler never panics, answers only documented status codes,
// never a 500 (a host panic), and nothing without a valid token succeeds.
func FuzzHTTPHandler(f *testing.F) {
	n := startHost(f, bucket.NewMem(), "a", f.TempDir(), map[string][]byte{"oneshot": testguest.Fixture(f, "oneshot_alarm")}, hostConfig{
		security: node.Security{Token: "op", TenantTokens: map[string]string{"t": "tt"}, PeerToken: "peer"},
	})
	h := n.Handler()
	due := string(hourAhead())
	for _, s := range []struct{ method, target, token, body string }{
		{"POST", "/v1/actors/t/oneshot/x", "tt", due},
		{"POST", "/v1/actors/t/oneshot/x?kind=exec-durable", "op", due},
		{"POST", "/v1/actors/t/oneshot/x?kind=later", "op", ""},
		{"GET", "/v1/actors/t/oneshot/x/alarm", "peer", ""},
		{"DELETE", "/v1/actors/t/oneshot/x", "tt", ""},
		{"POST", "/v1/actors/u/oneshot/x", "tt", due},
		{"POST", "/v1/actors/t/oneshot/a%2Fb%FF", "", due},
		{"POST", "/v1/actors/t/nope/x", "op", ""},
		{"POST", "/v1/actors/T/oneshot/" + strings.Repeat("%2F", 200), "op", ""},
		{"PUT", "/v1/actors/t/oneshot/x", "op", ""},
		{"GET", "/v1/healthz", "", ""},
		{"GET", "/v1/actors/t/../u/oneshot/x", "tt", ""},
		{"POST", "//v1/actors/t/oneshot/x?kind=exec&kind=exec-durable", "op", "\x00"},
	} {
		f.Add(s.method, s.target, s.token, []byte(s.body))
	}
	valid := map[string]bool{"op": true, "tt": true, "peer": true}
	f.Fuzz(func(t *testing.T, method, target, token string, body []byte) {
		var raw strings.Builder
		fmt.Fprintf(&raw, "%s %s HTTP/1.1\r\nHost: node\r\n", method, target)
		if token != "" {
			fmt.Fprintf(&raw, "Authorization: Bearer %s\r\n", token)
		}
		fmt.Fprintf(&raw, "Content-Length: %d\r\n\r\n%s", len(body), body)
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw.String())))
		if err != nil {
			return // the server answers 400 before any handler runs
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if !documented[rec.Code] {
			t.Fatalf("%s %q (token %q): %d %q, not a documented status", method, target, token, rec.Code, rec.Body)
		}
		ok := rec.Code == 200 || rec.Code == 204
		if ok && !valid[req.Header.Get("Authorization")[min(7, len(req.Header.Get("Authorization"))):]] && req.URL.Path != "/v1/healthz" && req.URL.Path != "/v1/readyz" && req.URL.Path != "/v1/openapi.json" {
			t.Fatalf("%s %q with token %q: %d, without a valid token", method, target, token, rec.Code)
		}
	})
}
