package s3_test

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/bucket/s3"
	"github.com/wasmkeep/alarms/internal/metricstest"
	"github.com/wasmkeep/alarms/internal/s3test"
)

func s3Requests(reg *prometheus.Registry, op, result string) float64 {
	return counterValue(reg, "wasmkeep_s3_requests_total", map[string]string{"operation": op, "result": result})
}

// counterValue reads reg's series of name with the given labels (0 when it
// has none).
func counterValue(reg *prometheus.Registry, name string, labels map[string]string) float64 {
	var pairs []string
	for k, v := range labels {
		pairs = append(pairs, k, v)
	}
	return metricstest.Gather(reg).Value(name, pairs...)
}

// Every operation of the S3 client is counted by the SDK's own operation
// name and its result, timed, and its HTTP attempts counted, retries
// included.
func TestS3MetricsCountEachOperationByResult(t *testing.T) {
	srv := s3test.Start(t)
	proxy := s3test.NewProxy(t, srv.Endpoint)
	reg := prometheus.NewRegistry()
	b := srv.NewClient(t, s3.WithEndpoint(proxy.URL), s3.WithMaxAttempts(3), s3.WithRegisterer(reg))

	if _, err := b.Put(ctx(t), "k", []byte("v"), bucket.Cond{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx(t), "k", []byte("v"), bucket.Cond{IfNoneMatch: true}); !errors.Is(err, bucket.ErrPrecondition) {
		t.Fatalf("second PUT If-None-Match: %v", err)
	}
	if _, _, err := b.Get(ctx(t), "k"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Get(ctx(t), "missing"); !errors.Is(err, bucket.ErrNotFound) {
		t.Fatalf("GET of a missing key: %v", err)
	}
	if _, err := b.List(ctx(t), "", "", 10); err != nil {
		t.Fatal(err)
	}
	if _, err := b.DeleteBatch(ctx(t), []string{"k"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx(t), "k"); err != nil {
		t.Fatal(err)
	}
	// Two 503s, then the PUT lands on its third attempt: one operation, ok,
	// three attempts.
	proxy.FailNext("PUT", 2, s3test.Respond503)
	if _, err := b.Put(ctx(t), "k2", []byte("v"), bucket.Cond{}); err != nil {
		t.Fatal(err)
	}
	// Three 503s: the operation fails after its three attempts.
	proxy.FailNext("GET", 3, s3test.Respond503)
	if _, _, err := b.Get(ctx(t), "k2"); err == nil {
		t.Fatal("GET with every attempt answered 503 succeeded")
	}

	for _, c := range []struct {
		op, result string
		want       float64
	}{
		{"PutObject", s3.ResultOK, 2},
		{"PutObject", s3.ResultPreconditionFailed, 1},
		{"GetObject", s3.ResultOK, 1},
		{"GetObject", s3.ResultNotFound, 1},
		{"GetObject", s3.ResultServerError, 1},
		{"ListObjectsV2", s3.ResultOK, 1},
		{"DeleteObjects", s3.ResultOK, 1},
		{"DeleteObject", s3.ResultOK, 1},
	} {
		if got := s3Requests(reg, c.op, c.result); got != c.want {
			t.Errorf("wasmkeep_s3_requests_total{operation=%q,result=%q} = %v, want %v", c.op, c.result, got, c.want)
		}
	}
	if got := counterValue(reg, "wasmkeep_s3_attempts_total", map[string]string{"operation": "PutObject"}); got != 5 {
		t.Errorf("PutObject attempts = %v, want 5 (1 + 1 + 3)", got)
	}
	if got := counterValue(reg, "wasmkeep_s3_attempts_total", map[string]string{"operation": "GetObject"}); got != 5 {
		t.Errorf("GetObject attempts = %v, want 5 (1 + 1 + 3)", got)
	}
	if got := counterValue(reg, "wasmkeep_s3_request_duration_seconds", map[string]string{"operation": "PutObject"}); got != 3 {
		t.Errorf("PutObject duration observations = %v, want 3", got)
	}
	if n := testutil.CollectAndCount(reg, "wasmkeep_s3_requests_total"); n != 8 {
		t.Errorf("%d series of wasmkeep_s3_requests_total, want 8", n)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("metric lint: %v %v", problems, err)
	}
}

// Two clients on one registry add to the same series; a client without a
// registerer records nothing.
func TestS3MetricsSharedRegistryAndNone(t *testing.T) {
	srv := s3test.Start(t)
	reg := prometheus.NewRegistry()
	a := srv.NewClient(t, s3.WithRegisterer(reg))
	b := srv.NewClient(t, s3.WithRegisterer(reg))
	plain := srv.NewClient(t)
	for _, c := range []*s3.Bucket{a, b, plain} {
		if _, err := c.Put(ctx(t), "k", nil, bucket.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	if got := s3Requests(reg, "PutObject", s3.ResultOK); got != 2 {
		t.Fatalf("PutObject ok = %v, want 2 (the two clients on the registry)", got)
	}
}
