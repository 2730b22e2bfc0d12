package s3_test

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/bucket/s3"
	"github.com/wasmkeep/alarms/internal/s3test"
)

// putOutcome is what a caller and an operator can see of one PUT: the
// error's class, the attempts it reports, the PUTs that reached the store
// and what the metrics recorded.
type putOutcome struct {
	OK, Precondition, NotFound, Canceled bool
	Attempts                             int // from the *OpError (0 after a success)
	PutsSent                             int // PUT requests the proxy saw
	Result                               string
	MetricAttempts                       float64
}

var putResults = []string{
	s3.ResultOK, s3.ResultNotFound, s3.ResultPreconditionFailed, s3.ResultThrottled,
	s3.ResultClientError, s3.ResultServerError, s3.ResultTimeout, s3.ResultCanceled,
	s3.ResultNetworkError,
}

// The lean PUT fails, retries and reports exactly as the SDK's PutObject
// did: the same attempts for the same faults (503s, a dropped or reset
// connection, a reply lost after a conditional write landed, an attempt
// that times out), the same error classes, the same metrics.
func TestS3LeanPutFailsAndRetriesAsTheSDKPut(t *testing.T) {
	srv := s3test.Start(t)
	proxy := s3test.NewProxy(t, srv.Endpoint)

	type scenario struct {
		name  string
		setup func(key string) // before the PUT, through the server directly
		fault func()
		cond  func(key string) bucket.Cond
		ctx   func() context.Context
		want  putOutcome
	}
	etagOf := map[string]string{}
	scenarios := []scenario{
		{name: "plain", want: putOutcome{OK: true, PutsSent: 1, Result: s3.ResultOK, MetricAttempts: 1}},
		{name: "503-then-ok", fault: func() { proxy.FailNext("PUT", 1, s3test.Respond503) },
			want: putOutcome{OK: true, PutsSent: 2, Result: s3.ResultOK, MetricAttempts: 2}},
		{name: "reset-then-ok", fault: func() { proxy.FailNext("PUT", 1, s3test.Reset) },
			want: putOutcome{OK: true, PutsSent: 2, Result: s3.ResultOK, MetricAttempts: 2}},
		{name: "dropped-then-ok", fault: func() { proxy.FailNext("PUT", 2, s3test.Drop) },
			want: putOutcome{OK: true, PutsSent: 3, Result: s3.ResultOK, MetricAttempts: 3}},
		{name: "503-every-attempt", fault: func() { proxy.FailNext("PUT", 3, s3test.Respond503) },
			want: putOutcome{Attempts: 3, PutsSent: 3, Result: s3.ResultServerError, MetricAttempts: 3}},
		{name: "reply-lost-if-none-match", fault: func() { proxy.FailNext("PUT", 1, s3test.DropAfterForward) },
			cond: func(string) bucket.Cond { return bucket.Cond{IfNoneMatch: true} },
			want: putOutcome{Precondition: true, Attempts: 2, PutsSent: 2, Result: s3.ResultPreconditionFailed, MetricAttempts: 2}},
		{name: "if-none-match-taken",
			setup: func(key string) { mustPut(t, srv.Bucket, key, []byte("x"), bucket.Cond{}) },
			cond:  func(string) bucket.Cond { return bucket.Cond{IfNoneMatch: true} },
			want:  putOutcome{Precondition: true, Attempts: 1, PutsSent: 1, Result: s3.ResultPreconditionFailed, MetricAttempts: 1}},
		{name: "if-match-ok",
			setup: func(key string) { etagOf[key] = mustPut(t, srv.Bucket, key, []byte("x"), bucket.Cond{}) },
			cond:  func(key string) bucket.Cond { return bucket.Cond{IfMatch: etagOf[key]} },
			want:  putOutcome{OK: true, PutsSent: 1, Result: s3.ResultOK, MetricAttempts: 1}},
		{name: "if-match-stale",
			setup: func(key string) { mustPut(t, srv.Bucket, key, []byte("x"), bucket.Cond{}) },
			cond:  func(string) bucket.Cond { return bucket.Cond{IfMatch: `"0123456789abcdef0123456789abcdef"`} },
			want:  putOutcome{Precondition: true, Attempts: 1, PutsSent: 1, Result: s3.ResultPreconditionFailed, MetricAttempts: 1}},
		{name: "if-match-missing",
			cond: func(string) bucket.Cond { return bucket.Cond{IfMatch: `"0123456789abcdef0123456789abcdef"`} },
			want: putOutcome{Precondition: true, NotFound: true, Attempts: 1, PutsSent: 1, Result: s3.ResultNotFound, MetricAttempts: 1}},
		{name: "canceled",
			ctx: func() context.Context {
				c, cancel := context.WithCancel(context.Background())
				cancel()
				return c
			},
			want: putOutcome{Canceled: true, Result: s3.ResultCanceled}},
		{name: "deadline-in-flight",
			fault: func() { proxy.SetDelay("PUT", 2*time.Second) },
			ctx: func() context.Context {
				c, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				t.Cleanup(cancel)
				return c
			},
			// The caller gets its deadline's error at once; the write
			// goes on to its end, its result not yet counted
			// (TestS3LeanPutCanceledInFlight sees it land).
			want: putOutcome{Attempts: 1, PutsSent: 1, MetricAttempts: 1}},
	}

	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			got := map[string]putOutcome{}
			for _, path := range []string{"sdk", "lean"} {
				reg := prometheus.NewRegistry()
				opts := []s3.Option{s3.WithEndpoint(proxy.URL), s3.WithMaxAttempts(3), s3.WithRegisterer(reg)}
				b := srv.NewClient(t, opts...)
				if !s3.HasLeanPut(b) {
					t.Fatal("a client on versitygw has no lean PUT path")
				}
				if path == "sdk" {
					s3.PutsThroughSDK(b)
				} else if !s3.HasLeanConns(b) {
					t.Fatal("the lean PUTs of a client on versitygw go through net/http")
				}
				key := "outcome/" + sc.name + "/" + path
				if sc.setup != nil {
					sc.setup(key)
				}
				cond := bucket.Cond{}
				if sc.cond != nil {
					cond = sc.cond(key)
				}
				c := ctx(t)
				if sc.ctx != nil {
					c = sc.ctx()
				}
				before := proxy.Count("PUT")
				if sc.fault != nil {
					sc.fault()
				}
				_, err := b.Put(c, key, []byte("body of "+path), cond)
				proxy.SetDelay("PUT", 0)
				o := putOutcome{
					OK:             err == nil,
					Precondition:   errors.Is(err, bucket.ErrPrecondition),
					NotFound:       errors.Is(err, bucket.ErrNotFound),
					Canceled:       errors.Is(err, context.Canceled),
					PutsSent:       proxy.Count("PUT") - before,
					MetricAttempts: counterValue(reg, "wasmkeep_s3_attempts_total", map[string]string{"operation": "PutObject"}),
				}
				if err != nil {
					o.Attempts = attempts(t, err)
				}
				o.Result = resultsOf(reg, "PutObject")
				got[path] = o
				if o.OK {
					if body := mustGet(t, srv.Bucket, key); string(body) != "body of "+path {
						t.Errorf("%s: the store holds %q", path, body)
					}
				}
				t.Logf("%s: %+v: %v", path, o, err)
			}
			sameOnBothPaths(t, got, sc.want)
		})
	}
}

// pathClient is a client of srv through proxy recording its metrics in
// reg, on the path named: "lean", the client as it is, or "sdk", every
// request through the SDK's middleware stack.
func pathClient(t *testing.T, srv *s3test.Server, proxy *s3test.Proxy, path string, reg *prometheus.Registry) *s3.Bucket {
	t.Helper()
	b := srv.NewClient(t, s3.WithEndpoint(proxy.URL), s3.WithMaxAttempts(3), s3.WithRegisterer(reg))
	if path == "sdk" {
		s3.PutsThroughSDK(b)
	} else if !s3.HasLeanConns(b) {
		t.Fatal("the lean requests of a client on versitygw go through net/http")
	}
	return b
}

// resultsOf is the results reg counted for operation op, in putResults'
// order, run together.
func resultsOf(reg *prometheus.Registry, op string) string {
	out := ""
	for _, r := range putResults {
		if s3Requests(reg, op, r) > 0 {
			out += r
		}
	}
	return out
}

// sameOnBothPaths fails t unless the SDK path's outcome (got["sdk"]) is
// want and the lean path's is the SDK path's.
func sameOnBothPaths[O any](t *testing.T, got map[string]O, want O) {
	t.Helper()
	if !reflect.DeepEqual(got["sdk"], want) {
		t.Errorf("SDK path: %+v, want %+v", got["sdk"], want)
	}
	if !reflect.DeepEqual(got["lean"], got["sdk"]) {
		t.Errorf("lean path: %+v, the SDK path: %+v", got["lean"], got["sdk"])
	}
}

// A timed-out attempt is retried within the bound and reported as a
// timeout, on the lean path as through the SDK.
func TestS3LeanPutRequestTimeout(t *testing.T) {
	srv := s3test.Start(t)
	proxy := s3test.NewProxy(t, srv.Endpoint)
	reg := prometheus.NewRegistry()
	b := srv.NewClient(t, s3.WithEndpoint(proxy.URL), s3.WithRegisterer(reg),
		s3.WithMaxAttempts(2), s3.WithRequestTimeout(200*time.Millisecond))
	// Longer than both attempts; the proxy holds a PUT's body unread, so
	// it ends its wait only after the delay.
	proxy.SetDelay("PUT", 2*time.Second)
	start := time.Now()
	_, err := b.Put(ctx(t), "slow", []byte("x"), bucket.Cond{IfNoneMatch: true})
	t.Logf("PUT returned after %v: %v", time.Since(start), err)
	proxy.SetDelay("PUT", 0)
	if err == nil || errors.Is(err, bucket.ErrPrecondition) {
		t.Fatalf("PUT that never gets an answer: err = %v", err)
	}
	if n := attempts(t, err); n != 2 {
		t.Errorf("error reports %d attempts, want 2", n)
	}
	if n := proxy.Count("PUT"); n != 2 {
		t.Errorf("proxy saw %d PUTs, want 2", n)
	}
	if got := s3Requests(reg, "PutObject", s3.ResultTimeout); got != 1 {
		t.Errorf("PutObject timeout = %v, want 1", got)
	}
}

// Keys with every class of byte the SDK escapes reach the store under
// their own name, with a signature the store accepts.
func TestS3LeanPutEscapesKeysAsTheSDK(t *testing.T) {
	srv := s3test.Start(t)
	keys := []string{
		"plain/key",
		"sp ace/and+plus/per%cent/q?uery/h#ash/amp&eq=/semi;colon",
		"unicode/ü/日本/emoji-☃",
		"marks/!$'()*,:@~_-.",
	}
	for _, k := range keys {
		mustPut(t, srv.Bucket, k, []byte(k), bucket.Cond{IfNoneMatch: true})
		if body := mustGet(t, srv.Bucket, k); string(body) != k {
			t.Errorf("GET %q = %q", k, body)
		}
	}
	got, err := srv.Bucket.List(ctx(t), "", "", 100)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Sorted(slices.Values(keys))
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("listed %q, want %q", got, want)
	}
}

// Over HTTPS the lean PUT leaves the payload out of the signature
// (UNSIGNED-PAYLOAD: TLS protects it), and the store accepts it; over
// plain HTTP the payload's SHA-256 is signed.
func TestS3LeanPutPayloadHashByScheme(t *testing.T) {
	srv := s3test.Start(t)
	target, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string][]string{} // scheme -> X-Amz-Content-Sha256 of each PUT
	record := func(scheme string, next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPut {
				mu.Lock()
				seen[scheme] = append(seen[scheme], r.Header.Get("X-Amz-Content-Sha256"))
				mu.Unlock()
			}
			next.ServeHTTP(w, r)
		})
	}
	rp := httputil.NewSingleHostReverseProxy(target) // keeps the Host header the client signed
	tlsSrv := httptest.NewUnstartedServer(record("https", rp))
	tlsSrv.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	tlsSrv.StartTLS()
	t.Cleanup(tlsSrv.Close)
	plain := httptest.NewServer(record("http", rp))
	t.Cleanup(plain.Close)

	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_CA_BUNDLE", ca)

	for _, c := range []struct {
		scheme, endpoint, want string
	}{
		{"https", tlsSrv.URL, "UNSIGNED-PAYLOAD"},
		{"http", plain.URL, "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"}, // SHA-256 of "hello"
	} {
		b := srv.NewClient(t, s3.WithEndpoint(c.endpoint))
		if !s3.HasLeanPut(b) || !s3.HasLeanConns(b) {
			t.Fatalf("%s: no lean PUT path, or not on its own connections", c.scheme)
		}
		key := "scheme/" + c.scheme
		if _, err := b.Put(ctx(t), key, []byte("hello"), bucket.Cond{IfNoneMatch: true}); err != nil {
			t.Fatalf("%s: %v", c.scheme, err)
		}
		if body := mustGet(t, srv.Bucket, key); string(body) != "hello" {
			t.Fatalf("%s: stored %q", c.scheme, body)
		}
		mu.Lock()
		got := seen[c.scheme]
		mu.Unlock()
		if !reflect.DeepEqual(got, []string{c.want}) {
			t.Errorf("%s: X-Amz-Content-Sha256 of the PUTs = %q, want [%q]", c.scheme, got, c.want)
		}
	}
}
