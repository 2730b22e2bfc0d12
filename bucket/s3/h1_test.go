package s3_test

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/bucket/s3"
	"github.com/wasmkeep/alarms/internal/s3test"
)

// A server that closes its idle keep-alive connections (as S3 does after
// a few seconds idle) costs the next PUT a new connection, not a failed
// attempt: the client sees the connection closed before it sends on it,
// as net/http does, and the PUT goes out once.
func TestS3LeanPutAfterTheServerClosedIdleConnections(t *testing.T) {
	srv := s3test.Start(t)
	for _, path := range []string{"sdk", "lean"} {
		t.Run(path, func(t *testing.T) {
			relay := newDialCounter(t, srv.Endpoint)
			reg := prometheus.NewRegistry()
			b := srv.NewClient(t, s3.WithEndpoint(relay.URL), s3.WithRegisterer(reg))
			if path == "sdk" {
				s3.PutsThroughSDK(b)
			} else if !s3.HasLeanConns(b) {
				t.Fatal("lean PUTs not on their own connections")
			}
			const rounds = 5
			for i := range rounds {
				if i > 0 {
					relay.CloseAll()
					time.Sleep(50 * time.Millisecond) // the FIN reaches the client
				}
				if _, err := b.Put(ctx(t), "idle/"+path+"/"+string(rune('a'+i)), []byte("x"), bucket.Cond{IfNoneMatch: true}); err != nil {
					t.Fatalf("PUT %d after the server closed the connection: %v", i, err)
				}
			}
			attempts := counterValue(reg, "wasmkeep_s3_attempts_total", map[string]string{"operation": "PutObject"})
			if attempts != rounds {
				t.Errorf("%d PUTs took %v attempts; want one each", rounds, attempts)
			}
			if n := relay.conns.Load(); n != rounds {
				t.Errorf("%d PUTs, each after the server closed every connection, opened %d connections; want %d", rounds, n, rounds)
			}
		})
	}
}

// putServer is an HTTP server that answers every PUT with 200 and an
// ETag (no S3 behind it: what the lean client does with connections is
// under test, not the store), counting the connections it accepts.
type putServer struct {
	*httptest.Server
	conns atomic.Int64
	mu    sync.Mutex
	paths []string
}

func newPutServer(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, n int)) *putServer {
	return startPutServer(t, false, handle)
}

// startPutServer starts a putServer, over TLS if useTLS, with a
// certificate the clients it makes trust (AWS_CA_BUNDLE).
func startPutServer(t *testing.T, useTLS bool, handle func(w http.ResponseWriter, r *http.Request, n int)) *putServer {
	t.Helper()
	s := &putServer{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		s.mu.Lock()
		s.paths = append(s.paths, r.URL.EscapedPath())
		n := len(s.paths)
		s.mu.Unlock()
		handle(w, r, n)
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	if !useTLS {
		s.Start()
		t.Cleanup(s.Close)
		return s
	}
	s.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	s.StartTLS()
	t.Cleanup(s.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_CA_BUNDLE", ca)
	return s
}

func (s *putServer) client(t *testing.T, opts ...s3.Option) *s3.Bucket {
	t.Helper()
	all := append([]s3.Option{s3.WithEndpoint(s.URL), s3.WithRegion("us-east-1"),
		s3.WithCredentials("AKID", "SECRET"), s3.WithRetryMaxBackoff(10 * time.Millisecond)}, opts...)
	b, err := s3.New(context.Background(), "bkt", all...)
	if err != nil {
		t.Fatal(err)
	}
	if !s3.HasLeanConns(b) {
		t.Fatal("lean PUTs not on their own connections")
	}
	return b
}

// Over TLS, as over plain TCP, one connection carries PUT after PUT
// (what a TLS 1.3 server sends after its handshake does not make the
// idle connection look broken), bodies small and large.
func TestS3LeanPutKeepsTLSConnections(t *testing.T) {
	s := startPutServer(t, true, func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.TLS == nil {
			t.Error("a PUT without TLS")
		}
		w.Header().Set("ETag", `"tls"`)
	})
	b := s.client(t)
	for i := range 10 {
		body := []byte("small")
		if i%2 == 1 {
			body = make([]byte, 100<<10) // past one write of head and body together
		}
		if etag, err := b.Put(ctx(t), "k", body, bucket.Cond{}); err != nil || etag != `"tls"` {
			t.Fatalf("PUT %d over TLS: %q, %v", i, etag, err)
		}
	}
	if n := s.conns.Load(); n != 1 {
		t.Errorf("10 PUTs over TLS opened %d connections, want 1", n)
	}
}

// An answer with Connection: close ends its connection: the next PUT
// dials a new one; otherwise one connection carries them all.
func TestS3LeanPutHonoursConnectionClose(t *testing.T) {
	for _, every := range []int{0, 3} {
		s := newPutServer(t, func(w http.ResponseWriter, _ *http.Request, n int) {
			if every > 0 && n%every == 0 {
				w.Header().Set("Connection", "close")
			}
			w.Header().Set("ETag", `"e`+string(rune('0'+n%10))+`"`)
		})
		b := s.client(t)
		const puts = 9
		for i := range puts {
			etag, err := b.Put(ctx(t), "k", []byte("body"), bucket.Cond{})
			if err != nil {
				t.Fatal(err)
			}
			if want := `"e` + string(rune('0'+(i+1)%10)) + `"`; etag != want {
				t.Fatalf("PUT %d: ETag %s, want %s", i, etag, want)
			}
		}
		want := int64(1)
		if every > 0 {
			want = puts / int64(every)
		}
		if n := s.conns.Load(); n != want {
			t.Errorf("Connection: close on every %d answers: %d PUTs opened %d connections, want %d", every, puts, n, want)
		}
		for _, p := range s.paths {
			if p != "/bkt/k" {
				t.Fatalf("PUT to %q, want /bkt/k", p)
			}
		}
	}
}

// A 307 or 308 is followed, through net/http, to where the store points,
// as the SDK's client follows it.
func TestS3LeanPutFollowsTemporaryRedirects(t *testing.T) {
	var fail atomic.Bool
	s := newPutServer(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.URL.Path == "/bkt/k" {
			http.Redirect(w, r, "/elsewhere/k", http.StatusTemporaryRedirect)
			return
		}
		if fail.Load() {
			w.WriteHeader(http.StatusPreconditionFailed)
			return
		}
		w.Header().Set("ETag", `"moved"`)
	})
	b := s.client(t)
	etag, err := b.Put(ctx(t), "k", []byte("body"), bucket.Cond{IfNoneMatch: true})
	if err != nil || etag != `"moved"` {
		t.Fatalf("PUT redirected: %q, %v", etag, err)
	}
	// A redirected PUT is one attempt, as net/http's following is within
	// one: a PUT that fails after a redirect reports one.
	fail.Store(true)
	_, err = b.Put(ctx(t), "k", []byte("body"), bucket.Cond{IfNoneMatch: true})
	if !errors.Is(err, bucket.ErrPrecondition) {
		t.Fatalf("PUT redirected to a 412: %v", err)
	}
	if n := attempts(t, err); n != 1 {
		t.Errorf("the PUT redirected to a 412 reports %d attempts, want 1", n)
	}
	if want := []string{"/bkt/k", "/elsewhere/k", "/bkt/k", "/elsewhere/k"}; strings.Join(s.paths, " ") != strings.Join(want, " ") {
		t.Fatalf("the server saw PUTs to %q, want %q", s.paths, want)
	}
}

// A PUT whose context is cancelled while it waits for the answer returns
// at once with context.Canceled (and the connection is not reused), on
// the lean path as through the SDK.
func TestS3LeanPutCanceledInFlight(t *testing.T) {
	srv := s3test.Start(t)
	proxy := s3test.NewProxy(t, srv.Endpoint)
	for _, path := range []string{"sdk", "lean"} {
		reg := prometheus.NewRegistry()
		b := srv.NewClient(t, s3.WithEndpoint(proxy.URL), s3.WithRegisterer(reg))
		if path == "sdk" {
			s3.PutsThroughSDK(b)
		}
		const delay = 2 * time.Second
		proxy.SetDelay("PUT", delay)
		c, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		start := time.Now()
		_, err := b.Put(c, "canceled/"+path, []byte("x"), bucket.Cond{IfNoneMatch: true})
		took := time.Since(start)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s: PUT cancelled in flight: %v", path, err)
		}
		if took >= delay {
			t.Errorf("%s: the cancelled PUT returned after %v, when the store answered", path, took)
		}
		// The write was not cut off: it goes on to its end and lands
		// whole (a write cut off part way is what an erasure-coded store
		// may apply to some drives only).
		landed := false
		for end := time.Now().Add(10 * delay); !landed && time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			_, _, gerr := b.Get(ctx(t), "canceled/"+path)
			landed = gerr == nil
		}
		proxy.SetDelay("PUT", 0)
		if !landed {
			t.Errorf("%s: the PUT its caller gave up on never landed: it was cut off", path)
		}
		if got := s3Requests(reg, "PutObject", s3.ResultOK); got != 1 {
			t.Errorf("%s: PutObject ok = %v, want 1 (the write went on to its end)", path, got)
		}
		// The client still works.
		if _, err := b.Put(ctx(t), "after/"+path, []byte("x"), bucket.Cond{}); err != nil {
			t.Errorf("%s: PUT after a cancelled one: %v", path, err)
		}
	}
}

// A DELETE whose caller gives up goes on to its end too.
func TestS3DeleteCanceledInFlightGoesOn(t *testing.T) {
	srv := s3test.Start(t)
	proxy := s3test.NewProxy(t, srv.Endpoint)
	b := srv.NewClient(t, s3.WithEndpoint(proxy.URL))
	for _, batch := range []bool{false, true} {
		key := fmt.Sprintf("delete-canceled/%v", batch)
		if _, err := b.Put(ctx(t), key, []byte("x"), bucket.Cond{}); err != nil {
			t.Fatal(err)
		}
		proxy.SetDelay("DELETE", 2*time.Second)
		proxy.SetDelay("POST", 2*time.Second) // DeleteObjects
		c, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		var err error
		if batch {
			_, err = b.DeleteBatch(c, []string{key})
		} else {
			err = b.Delete(c, key)
		}
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("batch %v: DELETE given up on: %v, want DeadlineExceeded", batch, err)
		}
		gone := false
		for end := time.Now().Add(20 * time.Second); !gone && time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			_, _, gerr := b.Get(ctx(t), key)
			gone = errors.Is(gerr, bucket.ErrNotFound)
		}
		proxy.SetDelay("DELETE", 0)
		proxy.SetDelay("POST", 0)
		if !gone {
			t.Errorf("batch %v: the DELETE its caller gave up on never landed: it was cut off", batch)
		}
	}
}

// An ETag condition with a line break in it is refused before anything is
// sent: it would otherwise end the header and add others of the caller's
// making to a signed request.
func TestS3LeanPutRefusesControlCharactersInHeaders(t *testing.T) {
	s := newPutServer(t, func(http.ResponseWriter, *http.Request, int) {})
	b := s.client(t)
	for _, etag := range []string{"\"e\"\r\nX-Amz-Evil: 1", "\"e\"\n", "\"e\x00\""} {
		_, err := b.Put(ctx(t), "k", []byte("x"), bucket.Cond{IfMatch: etag})
		if err == nil || !strings.Contains(err.Error(), "If-Match") {
			t.Errorf("If-Match %q: err = %v, want a refusal naming If-Match", etag, err)
		}
	}
	if len(s.paths) != 0 {
		t.Fatalf("the server received %d PUTs", len(s.paths))
	}
}
