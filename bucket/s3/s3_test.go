package s3_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/bucket/s3"
	"github.com/wasmkeep/alarms/internal/s3test"
)

// closedEndpoint returns the URL of a local port nothing listens on.
func closedEndpoint(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

func attempts(t *testing.T, err error) int {
	t.Helper()
	var opErr *bucket.OpError
	if !errors.As(err, &opErr) {
		t.Fatalf("error %v is not an *OpError", err)
	}
	return opErr.Attempts
}

func TestS3UnreachableIsABoundedError(t *testing.T) {
	guard, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := s3.New(guard, "unreachable",
		s3.WithEndpoint(closedEndpoint(t)), s3.WithCredentials("k", "s"),
		s3.WithMaxAttempts(3), s3.WithRetryMaxBackoff(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ops := map[string]func() error{
		"Get":    func() error { _, _, err := b.Get(guard, "k"); return err },
		"Put":    func() error { _, err := b.Put(guard, "k", []byte("x"), bucket.Cond{IfNoneMatch: true}); return err },
		"Delete": func() error { return b.Delete(guard, "k") },
		"List":   func() error { _, err := b.List(guard, "", "", 5000); return err },
		"Check":  func() error { return b.Check(guard) },
		"Ensure": func() error { return b.EnsureBucket(guard) },
		"Exists": func() error { _, err := b.Exists(guard); return err },
	}
	for name, op := range ops {
		err := op()
		if err == nil {
			t.Fatalf("%s on an unreachable endpoint succeeded", name)
		}
		if errors.Is(err, bucket.ErrNotFound) || errors.Is(err, bucket.ErrPrecondition) {
			t.Fatalf("%s: a connection failure was reported as %v", name, err)
		}
		if guard.Err() != nil {
			t.Fatalf("%s: only the test's guard deadline ended the call: %v", name, err)
		}
		if n := attempts(t, err); n != 3 {
			t.Errorf("%s: %d attempts, want the bound of 3: %v", name, n, err)
		}
	}
	if got := b.ListPagesSent(); got != 1 {
		t.Errorf("ListPagesSent = %d, want 1 (the failed first page)", got)
	}
}

func TestS3Retries503WithinTheBound(t *testing.T) {
	srv := s3test.Start(t)
	proxy := s3test.NewProxy(t, srv.Endpoint)
	b := srv.NewClient(t, s3.WithEndpoint(proxy.URL), s3.WithMaxAttempts(3))

	proxy.FailNext("PUT", 2, s3test.Respond503)
	if _, err := b.Put(ctx(t), "k", []byte("v1"), bucket.Cond{IfNoneMatch: true}); err != nil {
		t.Fatalf("PUT with two 503s and 3 attempts: %v", err)
	}
	if n := proxy.Count("PUT"); n != 3 {
		t.Fatalf("proxy saw %d PUTs, want 3", n)
	}

	proxy.FailNext("PUT", 3, s3test.Respond503)
	_, err := b.Put(ctx(t), "k", []byte("v2"), bucket.Cond{})
	if err == nil || errors.Is(err, bucket.ErrPrecondition) {
		t.Fatalf("PUT with three 503s and 3 attempts: err = %v, want a plain failure", err)
	}
	if n := attempts(t, err); n != 3 {
		t.Errorf("error reports %d attempts, want 3", n)
	}
	if n := proxy.Count("PUT"); n != 6 {
		t.Fatalf("proxy saw %d PUTs, want 6 (no attempt beyond the bound)", n)
	}
	if body := mustGet(t, srv.Bucket, "k"); string(body) != "v1" {
		t.Fatalf("body = %q, want v1 (the failed PUT was never forwarded)", body)
	}

	proxy.FailNext("GET", 1, s3test.Drop)
	if body := mustGet(t, b, "k"); string(body) != "v1" {
		t.Fatalf("GET after a dropped connection = %q", body)
	}
	if n := proxy.Count("GET"); n != 2 { // the dropped attempt and its retry
		t.Fatalf("proxy saw %d GETs, want 2", n)
	}
}

func TestS3RetriedConditionalPutReportsItsAttempts(t *testing.T) {
	srv := s3test.Start(t)
	proxy := s3test.NewProxy(t, srv.Endpoint)
	b := srv.NewClient(t, s3.WithEndpoint(proxy.URL), s3.WithMaxAttempts(3))

	// The first attempt lands but its reply is lost; the retry then finds
	// the key taken. The caller cannot tell this from losing a race, except
	// by the attempt count.
	proxy.FailNext("PUT", 1, s3test.DropAfterForward)
	_, err := b.Put(ctx(t), "hold", []byte("mine"), bucket.Cond{IfNoneMatch: true})
	if !errors.Is(err, bucket.ErrPrecondition) {
		t.Fatalf("err = %v, want ErrPrecondition from the retry", err)
	}
	if n := attempts(t, err); n != 2 {
		t.Fatalf("error reports %d attempts, want 2", n)
	}
	if body := mustGet(t, srv.Bucket, "hold"); string(body) != "mine" {
		t.Fatalf("body = %q, want the first attempt's", body)
	}
}

func TestS3RequestTimeoutIsRetriedThenReported(t *testing.T) {
	srv := s3test.Start(t)
	proxy := s3test.NewProxy(t, srv.Endpoint)
	b := srv.NewClient(t, s3.WithEndpoint(proxy.URL),
		s3.WithMaxAttempts(2), s3.WithRequestTimeout(200*time.Millisecond))
	mustPut(t, srv.Bucket, "slow", []byte("x"), bucket.Cond{})

	proxy.SetDelay("GET", time.Minute)
	guard := ctx(t)
	_, _, err := b.Get(guard, "slow")
	if err == nil || errors.Is(err, bucket.ErrNotFound) {
		t.Fatalf("GET that never gets an answer: err = %v", err)
	}
	if guard.Err() != nil {
		t.Fatalf("only the test's guard ended the GET: %v", err)
	}
	if n := attempts(t, err); n != 2 {
		t.Errorf("error reports %d attempts, want 2", n)
	}
	if n := proxy.Count("GET"); n != 2 {
		t.Errorf("proxy saw %d GETs, want 2", n)
	}
	proxy.SetDelay("GET", 0)
	if body := mustGet(t, b, "slow"); string(body) != "x" {
		t.Fatalf("GET without the delay = %q", body)
	}
}

func TestS3ListPagesReachTheServer(t *testing.T) {
	srv := s3test.Start(t)
	proxy := s3test.NewProxy(t, srv.Endpoint)
	b := srv.NewClient(t, s3.WithEndpoint(proxy.URL))
	keys := make([]string, 2001)
	for i := range keys {
		keys[i] = fmt.Sprintf("alarms/t/%015d", i)
	}
	putAll(t, srv.Bucket, keys)

	got, err := b.List(ctx(t), "alarms/t/", "", 2048)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, keys) {
		t.Fatalf("listed %d keys, want %d in order", len(got), len(keys))
	}
	if n, sent := proxy.Count("GET"), b.ListPagesSent(); n != 3 || sent != 3 {
		t.Fatalf("proxy saw %d GETs and the client counts %d pages; want 3 and 3", n, sent)
	}
}

func TestS3ConfigFromEnvironment(t *testing.T) {
	srv := s3test.Start(t)
	mustPut(t, srv.Bucket, "from-env", []byte("ok"), bucket.Cond{})
	t.Setenv("AWS_ENDPOINT_URL", srv.Endpoint)
	local := srv.AccessKey != "" // else the environment already holds the credentials
	if local {
		t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
		t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
		t.Setenv("AWS_REGION", "")
		t.Setenv("AWS_DEFAULT_REGION", "")
	}
	b, err := s3.New(ctx(t), srv.Name)
	if err != nil {
		t.Fatal(err)
	}
	if r := b.Client().Options().Region; local && r != s3.DefaultRegion {
		t.Errorf("region = %q, want the default %q", r, s3.DefaultRegion)
	}
	if !b.Client().Options().UsePathStyle {
		t.Error("a non-AWS endpoint from the environment did not get path-style addressing")
	}
	if body := mustGet(t, b, "from-env"); string(body) != "ok" {
		t.Fatalf("GET through the environment's configuration = %q", body)
	}
}

func TestS3EnsureBucketCreatesOnceAndCheckPasses(t *testing.T) {
	srv := s3test.Start(t)
	name := srv.Name + "-new"
	b, err := s3.New(ctx(t), name, srv.Options...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = b.Client().DeleteBucket(context.Background(), &awss3.DeleteBucketInput{Bucket: &name})
	})
	if _, err := b.Put(ctx(t), "k", nil, bucket.Cond{}); err == nil {
		t.Fatal("PUT into a bucket that does not exist yet succeeded")
	}
	for range 2 {
		if err := b.EnsureBucket(ctx(t)); err != nil {
			t.Fatalf("EnsureBucket: %v", err)
		}
	}
	if err := b.Check(ctx(t)); err != nil {
		t.Fatalf("Check against the server: %v", err)
	}
	if keys, err := b.List(ctx(t), "", "", 10); err != nil || len(keys) != 0 {
		t.Fatalf("bucket after Check holds %q, %v; want nothing", keys, err)
	}
}

// Exists tells a bucket that is there from one that is not, without
// creating it, and Endpoint names the server for messages about either.
func TestS3ExistsDoesNotCreate(t *testing.T) {
	srv := s3test.Start(t)
	missing, err := s3.New(ctx(t), srv.Name+"-missing", srv.Options...)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if ok, err := missing.Exists(ctx(t)); ok || err != nil {
			t.Fatalf("Exists on a bucket never created = %v, %v; want false, nil", ok, err)
		}
	}
	if ok, err := srv.Bucket.Exists(ctx(t)); !ok || err != nil {
		t.Fatalf("Exists on the test's bucket = %v, %v; want true, nil", ok, err)
	}
	if got := missing.Endpoint(); got != srv.Endpoint {
		t.Errorf("Endpoint() = %q, want the server's %q", got, srv.Endpoint)
	}
}

// dialCounter is a TCP relay to an S3 server that counts the connections
// clients open through it. A connection the server closes is closed to the
// client too, so a server that closes after each request shows up as one
// connection per request.
type dialCounter struct {
	URL   string
	conns atomic.Int64

	mu   sync.Mutex
	open []net.Conn
}

// CloseAll closes every connection through the relay, as a server closes
// its idle keep-alive connections.
func (d *dialCounter) CloseAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.open {
		c.Close()
	}
	d.open = nil
}

func newDialCounter(t *testing.T, endpoint string) *dialCounter {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &dialCounter{URL: "http://" + l.Addr().String()}
	var (
		wg    sync.WaitGroup
		ended bool
	)
	track := func(c net.Conn) bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.open = append(d.open, c)
		return !ended
	}
	t.Cleanup(func() {
		l.Close()
		d.mu.Lock()
		ended = true
		for _, c := range d.open { // idle keep-alive connections stay open otherwise
			c.Close()
		}
		d.mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			d.conns.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				up, err := net.Dial("tcp", u.Host)
				if err != nil {
					return
				}
				defer up.Close()
				if !track(c) || !track(up) {
					return
				}
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
				<-done // either side closed: close both
			}()
		}
	}()
	return d
}

// A burst of requests reuses the client's connections rather than dialling
// for each: the server keeps them alive (versitygw needs --keep-alive) and
// the client's pool keeps as many idle as run at once. Each dial costs a
// TCP handshake and, on a real endpoint, a TLS one.
func TestS3ReusesConnectionsOverABurst(t *testing.T) {
	srv := s3test.Start(t)
	relay := newDialCounter(t, srv.Endpoint)
	b := srv.NewClient(t, s3.WithEndpoint(relay.URL))

	// One after another: one connection serves the PUTs (the lean path's
	// own), one the GETs and DELETEs (net/http's).
	const sequential = 60
	for i := range sequential / 3 {
		key := fmt.Sprintf("seq/%03d", i)
		mustPut(t, b, key, []byte("x"), bucket.Cond{IfNoneMatch: true})
		mustGet(t, b, key)
		if err := b.Delete(ctx(t), key); err != nil {
			t.Fatal(err)
		}
	}
	if n := relay.conns.Load(); n > 2 {
		t.Fatalf("%d sequential requests opened %d connections; want 2 at most", sequential, n)
	}

	// 32 at once, 20 rounds: no more connections than requests in flight.
	// With Go's default pool (2 idle per host), most of each round's
	// connections are closed when returned, and the next round dials again.
	const workers, rounds = 32, 20
	before := relay.conns.Load()
	for r := range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := b.Put(ctx(t), fmt.Sprintf("burst/%02d/%02d", r, w), []byte("x"), bucket.Cond{})
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := relay.conns.Load() - before; n > workers+4 {
		t.Fatalf("%d rounds of %d concurrent PUTs opened %d connections; want at most %d (about one per worker)",
			rounds, workers, n, workers+4)
	}
}
