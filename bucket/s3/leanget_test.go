package s3_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/bucket/s3"
	"github.com/wasmkeep/alarms/internal/s3test"
)

// getOutcome is what a caller and an operator can see of one GET: the
// error's class, the attempts it reports, the GETs that reached the store,
// what the metrics recorded, and whether the body and ETag were the
// store's.
type getOutcome struct {
	OK, NotFound, Canceled bool
	Attempts               int // from the *OpError (0 after a success)
	GetsSent               int // GET requests the proxy saw
	Result                 string
	MetricAttempts         float64
	BodyAndETag            bool
}

// The lean GET fails, retries and reports exactly as the SDK's GetObject
// does: the same attempts for the same faults (503s, a dropped or reset
// connection, an answer lost), the same error classes (a missing key is
// bucket.ErrNotFound), the same metrics, and the same body and ETag.
func TestS3LeanGetFailsAndRetriesAsTheSDKGet(t *testing.T) {
	srv := s3test.Start(t)
	proxy := s3test.NewProxy(t, srv.Endpoint)
	type scenario struct {
		name    string
		missing bool
		fault   func()
		ctx     func() context.Context
		want    getOutcome
	}
	scenarios := []scenario{
		{name: "plain", want: getOutcome{OK: true, GetsSent: 1, Result: s3.ResultOK, MetricAttempts: 1, BodyAndETag: true}},
		{name: "503-then-ok", fault: func() { proxy.FailNext("GET", 1, s3test.Respond503) },
			want: getOutcome{OK: true, GetsSent: 2, Result: s3.ResultOK, MetricAttempts: 2, BodyAndETag: true}},
		{name: "reset-then-ok", fault: func() { proxy.FailNext("GET", 1, s3test.Reset) },
			want: getOutcome{OK: true, GetsSent: 2, Result: s3.ResultOK, MetricAttempts: 2, BodyAndETag: true}},
		{name: "dropped-then-ok", fault: func() { proxy.FailNext("GET", 2, s3test.Drop) },
			want: getOutcome{OK: true, GetsSent: 3, Result: s3.ResultOK, MetricAttempts: 3, BodyAndETag: true}},
		{name: "answer-lost-then-ok", fault: func() { proxy.FailNext("GET", 1, s3test.DropAfterForward) },
			want: getOutcome{OK: true, GetsSent: 2, Result: s3.ResultOK, MetricAttempts: 2, BodyAndETag: true}},
		{name: "503-every-attempt", fault: func() { proxy.FailNext("GET", 3, s3test.Respond503) },
			want: getOutcome{Attempts: 3, GetsSent: 3, Result: s3.ResultServerError, MetricAttempts: 3}},
		{name: "missing", missing: true,
			want: getOutcome{NotFound: true, Attempts: 1, GetsSent: 1, Result: s3.ResultNotFound, MetricAttempts: 1}},
		{name: "canceled",
			ctx: func() context.Context {
				c, cancel := context.WithCancel(context.Background())
				cancel()
				return c
			},
			want: getOutcome{Canceled: true, Result: s3.ResultCanceled}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			got := map[string]getOutcome{}
			for _, path := range []string{"sdk", "lean"} {
				reg := prometheus.NewRegistry()
				b := pathClient(t, srv, proxy, path, reg)
				key := "get-outcome/" + sc.name + "/" + path
				want, wantETag := []byte("body of "+key), ""
				if !sc.missing {
					wantETag = mustPut(t, srv.Bucket, key, want, bucket.Cond{})
				}
				c := ctx(t)
				if sc.ctx != nil {
					c = sc.ctx()
				}
				before := proxy.Count("GET")
				if sc.fault != nil {
					sc.fault()
				}
				body, etag, err := b.Get(c, key)
				o := getOutcome{
					OK:             err == nil,
					NotFound:       errors.Is(err, bucket.ErrNotFound),
					Canceled:       errors.Is(err, context.Canceled),
					GetsSent:       proxy.Count("GET") - before,
					MetricAttempts: counterValue(reg, "wasmkeep_s3_attempts_total", map[string]string{"operation": "GetObject"}),
					BodyAndETag:    err == nil && bytes.Equal(body, want) && etag == wantETag,
				}
				if err != nil {
					o.Attempts = attempts(t, err)
				}
				o.Result = resultsOf(reg, "GetObject")
				got[path] = o
				t.Logf("%s: %+v: %v", path, o, err)
			}
			sameOnBothPaths(t, got, sc.want)
		})
	}
}

// The lean GET reads bodies of every size the node meets (an empty one, a
// record, a snapshot, one past the size read in one piece by the
// connection's buffer) and keys with every class of byte the SDK
// escapes, as the store holds them; a GET whose attempt times out is
// retried within the bound.
func TestS3LeanGetReadsWhatTheStoreHolds(t *testing.T) {
	srv := s3test.Start(t)
	if !s3.HasLeanConns(srv.Bucket) {
		t.Fatal("the lean requests of a client on versitygw go through net/http")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	keys := []string{
		"plain/key",
		"sp ace/and+plus/per%cent/q?uery/h#ash/amp&eq=/semi;colon",
		"unicode/ü/日本/emoji-☃",
		"marks/!$'()*,:@~_-.",
	}
	for i, size := range []int{0, 1, 300, 24 << 10, 1 << 20, 3<<20 + 7} {
		body := make([]byte, size)
		for j := range body {
			body[j] = byte(rng.IntN(256))
		}
		key := keys[i%len(keys)] + "/" + time.Duration(size).String()
		etag := mustPut(t, srv.Bucket, key, body, bucket.Cond{})
		got, gotETag, err := srv.Bucket.Get(ctx(t), key)
		if err != nil {
			t.Fatalf("GET %q (%d bytes): %v", key, size, err)
		}
		if !bytes.Equal(got, body) || gotETag != etag {
			t.Fatalf("GET %q: %d bytes, ETag %s; put %d bytes, ETag %s", key, len(got), gotETag, size, etag)
		}
	}

	proxy := s3test.NewProxy(t, srv.Endpoint)
	reg := prometheus.NewRegistry()
	b := srv.NewClient(t, s3.WithEndpoint(proxy.URL), s3.WithRequestTimeout(300*time.Millisecond), s3.WithMaxAttempts(3), s3.WithRegisterer(reg))
	etag := mustPut(t, srv.Bucket, "slow", []byte("slow body"), bucket.Cond{})
	proxy.SetDelay("GET", time.Second)
	go func() {
		// The second attempt goes through at once.
		for proxy.Count("GET") < 1 {
			time.Sleep(time.Millisecond)
		}
		proxy.SetDelay("GET", 0)
	}()
	body, gotETag, err := b.Get(ctx(t), "slow")
	if err != nil || string(body) != "slow body" || gotETag != etag {
		t.Fatalf("GET after a timed-out attempt: %q, %s, %v", body, gotETag, err)
	}
	if n := counterValue(reg, "wasmkeep_s3_attempts_total", map[string]string{"operation": "GetObject"}); n != 2 {
		t.Fatalf("%v attempts, want 2: one timed out, one not", n)
	}
}
