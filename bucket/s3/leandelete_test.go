package s3_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/bucket/s3"
	"github.com/wasmkeep/alarms/internal/s3test"
)

// deleteOutcome is what a caller and an operator can see of one
// DeleteBatch: the error's class and attempts, the keys reported deleted
// and those left in the store, the requests that reached the store and the
// metrics.
type deleteOutcome struct {
	OK             bool
	Attempts       int
	Deleted        []string
	Left           []string
	PostsSent      int
	Result         string
	MetricAttempts float64
}

// uaRecorder forwards requests to the store and keeps the User-Agent of
// each multi-object delete: the lean path's or the SDK's.
type uaRecorder struct {
	proxy *httputil.ReverseProxy
	mu    sync.Mutex
	uas   []string
}

func (r *uaRecorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method == http.MethodPost {
		r.mu.Lock()
		r.uas = append(r.uas, req.Header.Get("User-Agent"))
		r.mu.Unlock()
	}
	r.proxy.ServeHTTP(w, req)
}

func (r *uaRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.uas
	r.uas = nil
	return out
}

// The multi-object delete on the lean path removes what the SDK's did,
// keys that need escaping in XML or in a URL included, and fails, retries
// and reports as the SDK's did (503s, a reset connection, a store that
// fails every attempt), against versitygw; each request went on the path
// it was meant to.
func TestS3LeanDeleteBatchAsTheSDK(t *testing.T) {
	srv := s3test.Start(t)
	target, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	rec := &uaRecorder{proxy: httputil.NewSingleHostReverseProxy(target)}
	front := httptest.NewServer(rec)
	t.Cleanup(front.Close)
	proxy := s3test.NewProxy(t, front.URL)

	type scenario struct {
		name    string
		fault   func()
		missing bool // the keys are not in the store
		want    deleteOutcome
	}
	scenarios := []scenario{
		{name: "plain", want: deleteOutcome{OK: true, PostsSent: 1, Result: s3.ResultOK, MetricAttempts: 1}},
		{name: "missing-keys", missing: true, want: deleteOutcome{OK: true, PostsSent: 1, Result: s3.ResultOK, MetricAttempts: 1}},
		{name: "503-then-ok", fault: func() { proxy.FailNext("POST", 1, s3test.Respond503) },
			want: deleteOutcome{OK: true, PostsSent: 2, Result: s3.ResultOK, MetricAttempts: 2}},
		{name: "reset-then-ok", fault: func() { proxy.FailNext("POST", 1, s3test.Reset) },
			want: deleteOutcome{OK: true, PostsSent: 2, Result: s3.ResultOK, MetricAttempts: 2}},
		{name: "503-every-attempt", fault: func() { proxy.FailNext("POST", 3, s3test.Respond503) },
			want: deleteOutcome{Attempts: 3, PostsSent: 3, Result: s3.ResultServerError, MetricAttempts: 3}},
	}
	names := []string{"a&b", "<tag>", `quote"s'`, "sp ace/x", "é/ü/日本", "plus+percent%", "n/1"}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			got := map[string]deleteOutcome{}
			for _, path := range []string{"sdk", "lean"} {
				reg := prometheus.NewRegistry()
				b := pathClient(t, srv, proxy, path, reg)
				prefix := "del/" + sc.name + "/" + path + "/"
				var keys []string
				for _, n := range names {
					keys = append(keys, prefix+n)
				}
				if !sc.missing {
					for _, k := range keys {
						mustPut(t, srv.Bucket, k, []byte("x"), bucket.Cond{})
					}
				}
				rec.take()
				before := proxy.Count("POST")
				if sc.fault != nil {
					sc.fault()
				}
				deleted, err := b.DeleteBatch(ctx(t), keys)
				left, lerr := srv.Bucket.List(ctx(t), prefix, "", 100)
				if lerr != nil {
					t.Fatal(lerr)
				}
				o := deleteOutcome{
					OK:             err == nil,
					PostsSent:      proxy.Count("POST") - before,
					MetricAttempts: counterValue(reg, "wasmkeep_s3_attempts_total", map[string]string{"operation": "DeleteObjects"}),
				}
				for _, k := range deleted {
					o.Deleted = append(o.Deleted, strings.TrimPrefix(k, prefix))
				}
				for _, k := range left {
					o.Left = append(o.Left, strings.TrimPrefix(k, prefix))
				}
				if err != nil {
					o.Attempts = attempts(t, err)
				}
				o.Result = resultsOf(reg, "DeleteObjects")
				got[path] = o
				for _, ua := range rec.take() {
					if lean := ua == "wasmkeep-alarms"; lean != (path == "lean") {
						t.Errorf("%s path: a multi-object delete went with User-Agent %q", path, ua)
					}
				}
				t.Logf("%s: %+v: %v", path, o, err)
			}
			want := sc.want
			switch {
			case !want.OK:
				want.Left = slices.Sorted(slices.Values(names))
				if sc.missing {
					want.Left = nil
				}
			default:
				want.Deleted = names
			}
			sameOnBothPaths(t, got, want)
		})
	}
}

// A store's answer that some keys were not deleted reaches the caller
// alike on both paths: those keys in a *bucket.BatchError with the
// store's code and message, the others deleted, a missing key (NoSuchKey)
// deleted. A fake store answers, as versitygw cannot be made to refuse
// one key of a request.
func TestS3LeanDeleteBatchReadsPerKeyErrors(t *testing.T) {
	answer := `<?xml version="1.0" encoding="UTF-8"?>
<DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">` +
		`<Error><Key>b&amp;c</Key><Code>AccessDenied</Code><Message>Access Denied</Message></Error>` +
		`<Error><Key>gone</Key><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message></Error>` +
		`<Error><Key>d</Key><Code>InternalError</Code><Message>try again</Message></Error>` +
		`</DeleteResult>`
	var mu sync.Mutex
	var uas []string
	store := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.RawQuery != "delete=" {
			http.Error(w, "unexpected", http.StatusBadRequest)
			return
		}
		mu.Lock()
		uas = append(uas, r.Header.Get("User-Agent"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/xml")
		_, _ = w.Write([]byte(answer))
	}))
	t.Cleanup(store.Close)
	keys := []string{"a", "b&c", "gone", "d"}
	type outcome struct {
		Deleted []string
		Failed  map[string]string
	}
	got := map[string]outcome{}
	for _, path := range []string{"sdk", "lean"} {
		b, err := s3.New(context.Background(), "bkt", s3.WithEndpoint(store.URL),
			s3.WithCredentials("AKID", "SECRET"), s3.WithRegion("us-east-1"))
		if err != nil {
			t.Fatal(err)
		}
		if path == "sdk" {
			s3.PutsThroughSDK(b)
		}
		deleted, err := b.DeleteBatch(ctx(t), keys)
		var be *bucket.BatchError
		if !errors.As(err, &be) {
			t.Fatalf("%s path: error %v, want a *bucket.BatchError", path, err)
		}
		o := outcome{Deleted: deleted, Failed: map[string]string{}}
		for k, e := range be.Failed {
			o.Failed[k] = e.Error()
		}
		got[path] = o
	}
	want := outcome{Deleted: []string{"a", "gone"}, Failed: map[string]string{
		"b&c": "AccessDenied: Access Denied", "d": "InternalError: try again"}}
	if !reflect.DeepEqual(got["sdk"], want) {
		t.Errorf("SDK path: %+v, want %+v", got["sdk"], want)
	}
	if !reflect.DeepEqual(got["lean"], got["sdk"]) {
		t.Errorf("lean path: %+v, the SDK path: %+v", got["lean"], got["sdk"])
	}
	if len(uas) != 2 || uas[0] == "wasmkeep-alarms" || uas[1] != "wasmkeep-alarms" {
		t.Errorf("User-Agents of the SDK's and the lean request: %q", uas)
	}
}

// A 307 to a multi-object delete is followed, through net/http, as one
// attempt; keys the lean request's XML does not carry (control
// characters) go through the SDK, in a request of their own.
func TestS3LeanDeleteBatchRedirectsAndFallsBack(t *testing.T) {
	type seen struct{ path, ua, body string }
	var mu sync.Mutex
	var got []seen
	store := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, seen{r.URL.Path, r.Header.Get("User-Agent"), string(body)})
		mu.Unlock()
		if r.URL.Path == "/bkt" && r.Header.Get("User-Agent") == "wasmkeep-alarms" {
			http.Redirect(w, r, "/elsewhere?delete=", http.StatusTemporaryRedirect)
			return
		}
		_, _ = w.Write([]byte(`<DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"></DeleteResult>`))
	}))
	t.Cleanup(store.Close)
	b, err := s3.New(context.Background(), "bkt", s3.WithEndpoint(store.URL),
		s3.WithCredentials("AKID", "SECRET"), s3.WithRegion("us-east-1"))
	if err != nil {
		t.Fatal(err)
	}
	deleted, err := b.DeleteBatch(ctx(t), []string{"k&1"})
	if err != nil || !slices.Equal(deleted, []string{"k&1"}) {
		t.Fatalf("redirected delete: %q, %v", deleted, err)
	}
	if len(got) != 2 || got[0].ua != "wasmkeep-alarms" || got[1].path != "/elsewhere" || got[1].body != got[0].body ||
		!strings.Contains(got[0].body, "<Key>k&amp;1</Key>") {
		t.Fatalf("the store saw %+v; want the lean request, then the same body at /elsewhere", got)
	}
	got = nil
	if _, err := b.DeleteBatch(ctx(t), []string{"ctl\x01"}); err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 || got[0].ua == "wasmkeep-alarms" {
		t.Fatalf("a key with a control character went with %+v; want the SDK's request", got)
	}
}

// Multi-object deletes go on the lean PUTs' connections, over TLS as over
// TCP: PUTs and deletes in turn, small and large, keep one connection.
func TestS3LeanDeleteBatchSharesTLSConnections(t *testing.T) {
	var posts atomic.Int32
	s := startPutServer(t, true, func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.TLS == nil {
			t.Error("a request without TLS")
		}
		if r.Method == http.MethodPost {
			posts.Add(1)
			if r.Header.Get("User-Agent") != "wasmkeep-alarms" {
				t.Errorf("a multi-object delete with User-Agent %q", r.Header.Get("User-Agent"))
			}
			_, _ = w.Write([]byte(`<DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"></DeleteResult>`))
			return
		}
		w.Header().Set("ETag", `"tls"`)
	})
	b := s.client(t)
	for i := range 6 {
		if _, err := b.Put(ctx(t), "k", []byte("small"), bucket.Cond{}); err != nil {
			t.Fatalf("PUT %d over TLS: %v", i, err)
		}
		keys := []string{"a", "b"}
		if i%2 == 1 {
			keys = make([]string, 1000) // a body past one write of head and body together
			for j := range keys {
				keys[j] = fmt.Sprintf("cluster/state/tenant/class/actor-%04d/snapshot", j)
			}
		}
		if deleted, err := b.DeleteBatch(ctx(t), keys); err != nil || len(deleted) != len(keys) {
			t.Fatalf("delete %d over TLS: %d of %d, %v", i, len(deleted), len(keys), err)
		}
	}
	if n := posts.Load(); n != 6 {
		t.Errorf("the server saw %d multi-object deletes, want 6", n)
	}
	if n := s.conns.Load(); n != 1 {
		t.Errorf("6 PUTs and 6 deletes over TLS opened %d connections, want 1", n)
	}
}
