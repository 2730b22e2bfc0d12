package node_test

// Tokens and TLS on the HTTP API: who gets in, who is turned away, and
// forwarding between nodes that serve HTTPS and check tokens.

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/internal/testca"
	"github.com/wasmkeep/alarms/node"
)

// secureNode starts a cluster node on b whose API is served on a port of
// 127.0.0.1, over TLS when serverTLS is set, with sec in force.
func secureNode(t *testing.T, b bucket.Bucket, name string, classes map[string][]byte, sec node.Security, serverTLS *tls.Config, log io.Writer) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var out io.Writer = testWriter{t}
	if log != nil {
		out = io.MultiWriter(out, log)
	}
	n, err := node.New(context.Background(), node.Config{
		DataDir: t.TempDir(), Classes: classes, Security: sec,
		Logger:  hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Warn, Output: out}),
		Cluster: &node.ClusterConfig{Bucket: b, NodeID: name, Addr: ln.Addr().String(), IdleTimeout: time.Hour, SweepPeriod: time.Hour},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	srv := &http.Server{Handler: n.Handler(), TLSConfig: serverTLS}
	scheme := "http"
	if serverTLS != nil {
		scheme = "https"
		go srv.ServeTLS(ln, "", "")
	} else {
		go srv.Serve(ln)
	}
	t.Cleanup(func() { srv.Close() })
	return scheme + "://" + ln.Addr().String()
}

// send makes one call with an optional bearer token.
func send(t *testing.T, c *http.Client, method, u, token string, body []byte) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, said(t, resp.Header, b)
}

func TestTokensDecideWhoReachesWhichTenant(t *testing.T) {
	t.Parallel()
	u := secureNode(t, bucket.NewMem(), "a", counter(t), node.Security{
		Token:        "operator-secret",
		TenantTokens: map[string]string{"t": "tenant-t-secret", "u": "tenant-u-secret"},
	}, nil, nil)
	c := http.DefaultClient
	actorT := u + "/v1/actors/t/counter/x"
	actorU := u + "/v1/actors/u/counter/x"
	for _, tc := range []struct {
		name, method, url, token string
		header                   string // the Authorization header as sent, when not a bearer token
		status                   int
		says                     string
	}{
		{"no token", "POST", actorT, "", "", 401, "needs a token"},
		{"no token, state", "GET", actorT + "/alarm", "", "", 401, "needs a token"},
		{"no token, delete", "DELETE", actorT, "", "", 401, "needs a token"},
		{"an unknown token", "POST", actorT, "tenant-t-secreT", "", 401, "not one this node knows"},
		{"a token's prefix", "POST", actorT, "tenant-t", "", 401, "not one this node knows"},
		{"basic auth", "POST", actorT, "", "Basic dDp0", 401, `not "Bearer <token>"`},
		{"an empty bearer", "POST", actorT, "", "Bearer ", 401, `not "Bearer <token>"`},
		{"another tenant's token", "POST", actorU, "tenant-t-secret", "", 403, `the token of tenant "t" does not reach tenant "u"`},
		{"another tenant's token, delete", "DELETE", actorU, "tenant-t-secret", "", 403, `does not reach tenant "u"`},
		{"another tenant's token, escaped", "POST", u + "/v1/actors/%75/counter/x", "tenant-t-secret", "", 403, `does not reach tenant "u"`},
		{"a tenant's token outside /v1/actors", "GET", u + "/v1/other", "tenant-t-secret", "", 403, "reaches only /v1/actors/t/"},
		{"its own tenant", "POST", actorT + "?kind=exec-durable", "tenant-t-secret", "", 200, `"requests":1,`},
		{"its own tenant, lowercase scheme", "POST", actorT, "", "bearer tenant-t-secret", 200, `"requests":2,`},
		{"the other tenant's own token", "POST", actorU, "tenant-u-secret", "", 200, `"requests":1,`},
		{"the operator's token, either tenant", "POST", actorU, "operator-secret", "", 200, `"requests":2,`},
		{"the operator's token, state", "GET", actorT + "/alarm", "operator-secret", "", 200, `"alarm_ms":null`},
		{"health needs no token", "GET", u + "/v1/healthz", "", "", 200, "ok"},
		{"readiness needs no token (not started: not ready)", "GET", u + "/v1/readyz", "", "", 503, `"ready":false`},
	} {
		req, _ := http.NewRequest(tc.method, tc.url, nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		if tc.header != "" {
			req.Header.Set("Authorization", tc.header)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body := said(t, resp.Header, raw)
		if resp.StatusCode != tc.status || !strings.Contains(body, tc.says) {
			t.Errorf("%s: %d %q, want %d saying %q", tc.name, resp.StatusCode, body, tc.status, tc.says)
		}
		if resp.StatusCode == 401 && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: a 401 without WWW-Authenticate: Bearer (%q)", tc.name, resp.Header.Get("WWW-Authenticate"))
		}
	}
	// Nothing turned away ran: t's actor counted only its two requests.
	if status, _, body := send(t, c, "POST", actorT, "operator-secret", []byte("get")); status != 200 || !strings.Contains(body, `"requests":3,`) {
		t.Fatalf("after the refused calls: %d %q, want the third request", status, body)
	}
}

// Without any token the API is open, as before, and the node says so.
func TestAnOpenAPIIsLogged(t *testing.T) {
	t.Parallel()
	var log bytes.Buffer
	u := secureNode(t, bucket.NewMem(), "a", map[string][]byte{}, node.Security{}, nil, &log)
	if status, _, body := send(t, http.DefaultClient, "GET", u+"/v1/actors/t/counter/x/alarm", "", nil); status != 404 {
		t.Fatalf("an open API without a token: %d %q, want the call to run (404: class not served)", status, body)
	}
	if !strings.Contains(log.String(), "the HTTP API has no tokens") {
		t.Fatalf("the log at start does not say the API is open:\n%s", log.String())
	}
}

func TestBadSecurityIsRefusedAtStart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		sec  node.Security
		says string
	}{
		{"a tenant token equal to the operator's", node.Security{Token: "x", TenantTokens: map[string]string{"t": "x"}}, `the token of tenant "t" is the same as the token`},
		{"the peer token equal to the operator's", node.Security{Token: "x", PeerToken: "x"}, "the peer token is the same as the token"},
		{"an invalid tenant", node.Security{TenantTokens: map[string]string{"T": "x"}}, `the tenant "T"`},
		{"an empty tenant token", node.Security{TenantTokens: map[string]string{"t": ""}}, `the token of tenant "t" is empty`},
		{"white space", node.Security{Token: "x\n"}, "white space"},
	} {
		_, err := node.New(context.Background(), node.Config{DataDir: t.TempDir(), Security: tc.sec})
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.says)
		}
	}
}

// Two nodes serving HTTPS with certificates of one CA, both checking
// tokens: a call through the node that does not hold the actor reaches the
// holder over TLS with the peer token. Node a knows no tenant token, so a
// tenant's call through b gets in only because b forwards it with the
// peer token.
func TestForwardingWithTLSAndTokens(t *testing.T) {
	t.Parallel()
	certFile, keyFile, caFile := testca.Write(t, t.TempDir())
	serverTLS, peerTLS, err := node.LoadTLS(certFile, keyFile, caFile)
	if err != nil {
		t.Fatal(err)
	}
	b := bucket.NewMem()
	classes := counter(t)
	a := secureNode(t, b, "a", classes, node.Security{Token: "op", PeerToken: "peer", PeerTLS: peerTLS}, serverTLS, nil)
	bn := secureNode(t, b, "b", classes, node.Security{Token: "op", PeerToken: "peer", PeerTLS: peerTLS,
		TenantTokens: map[string]string{"t": "tenant-t"}}, serverTLS, nil)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: peerTLS}}

	// a takes the actor.
	if status, _, body := send(t, client, "POST", a+"/v1/actors/t/counter/x?kind=exec-durable", "op", []byte("get")); status != 200 {
		t.Fatalf("on a: %d %q", status, body)
	}
	// Through b, with t's token (which a does not know): forwarded to a.
	var c counts
	for i := 2; i <= 3; i++ {
		status, _, body := send(t, client, "POST", bn+"/v1/actors/t/counter/x", "tenant-t", []byte("get"))
		if status != 200 {
			t.Fatalf("through b: %d %q, want a's answer", status, body)
		}
		if err := json.Unmarshal([]byte(body), &c); err != nil || c.Requests != i {
			t.Fatalf("through b: %s (%v), want request %d counted on a", body, err, i)
		}
	}
	status, _, body := send(t, client, "GET", bn+"/v1/actors/t/counter/x/alarm", "tenant-t", nil)
	var st node.AlarmState
	if status != 200 || json.Unmarshal([]byte(body), &st) != nil || st.Node != "a" {
		t.Fatalf("state through b: %d %q, want a's answer", status, body)
	}
	// b still checks the client: no token, or t's token on another tenant.
	if status, _, body := send(t, client, "POST", bn+"/v1/actors/t/counter/x", "", nil); status != 401 {
		t.Fatalf("through b without a token: %d %q, want 401", status, body)
	}
	if status, _, body := send(t, client, "POST", bn+"/v1/actors/u/counter/x", "tenant-t", nil); status != 403 {
		t.Fatalf("through b to tenant u with t's token: %d %q, want 403", status, body)
	}
	// a does not take t's token itself, and plain HTTP reaches no node.
	if status, _, body := send(t, client, "POST", a+"/v1/actors/t/counter/x", "tenant-t", nil); status != 401 {
		t.Fatalf("t's token on a: %d %q, want 401", status, body)
	}
	if status, _, _ := send(t, http.DefaultClient, "GET", "http://"+strings.TrimPrefix(a, "https://")+"/v1/healthz", "", nil); status != http.StatusBadRequest {
		t.Fatalf("plain HTTP to a TLS listener: %d, want Go's 400 for an HTTP request to an HTTPS server", status)
	}
}
