//go:build unix

package s3_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/bucket/s3"
	"github.com/wasmkeep/alarms/internal/s3test"
)

// processCPU is this process's CPU time, user and system: the client's
// work, not the S3 server's (another process).
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkS3Put measures the client's CPU per PUT on versitygw (cpu-us/put:
// building, signing and sending the request, reading the answer), for an
// empty object (an index entry) and a 32 KiB one (a small actor's
// snapshot), each from a goroutine of its own, as a delivery sends it;
// path=lean is the client as it is, path=sdk the same client sending its
// PUTs through the SDK's middleware stack.
//
//	go test ./bucket -run '^$' -bench S3Put -benchtime 2000x
func BenchmarkS3Put(b *testing.B) {
	srv := s3test.Start(b)
	sdk := srv.NewClient(b)
	s3.PutsThroughSDK(sdk)
	for _, size := range []int{0, 32 << 10} {
		for _, path := range []struct {
			name string
			c    *s3.Bucket
		}{{"sdk", sdk}, {"lean", srv.Bucket}} {
			b.Run(fmt.Sprintf("bytes-%d/path=%s", size, path.name), func(b *testing.B) {
				benchPut(b, path.c, size)
			})
		}
	}
}

func benchPut(b *testing.B, c *s3.Bucket, size int) {
	ctx := context.Background()
	body := make([]byte, size)
	done := make(chan error)
	c0 := processCPU(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		go func() {
			_, err := c.Put(ctx, fmt.Sprintf("bench/%s/%d", b.Name(), i), body, bucket.Cond{})
			done <- err
		}()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU(b)-c0).Microseconds())/float64(b.N), "cpu-us/put")
}

// BenchmarkS3Get measures the client's CPU per GET on versitygw
// (cpu-us/get: building, signing and sending the request, reading the
// answer and its body), for a 300-byte object (an ownership record) and
// a 24 KiB one (a small actor's snapshot), each from a goroutine of its
// own, as a takeover sends it; path=lean is the client as it is,
// path=sdk the same client sending its GETs through the SDK's
// middleware stack.
//
//	go test ./bucket/s3 -run '^$' -bench S3Get -benchtime 2000x
func BenchmarkS3Get(b *testing.B) {
	srv := s3test.Start(b)
	sdk := srv.NewClient(b)
	s3.PutsThroughSDK(sdk)
	for _, size := range []int{300, 24 << 10} {
		key := fmt.Sprintf("bench/get/%d", size)
		if _, err := srv.Bucket.Put(context.Background(), key, make([]byte, size), bucket.Cond{}); err != nil {
			b.Fatal(err)
		}
		for _, path := range []struct {
			name string
			c    *s3.Bucket
		}{{"sdk", sdk}, {"lean", srv.Bucket}} {
			b.Run(fmt.Sprintf("bytes-%d/path=%s", size, path.name), func(b *testing.B) {
				ctx := context.Background()
				done := make(chan error)
				c0 := processCPU(b)
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					go func() {
						body, _, err := path.c.Get(ctx, key)
						if err == nil && len(body) != size {
							err = fmt.Errorf("read %d bytes of %d", len(body), size)
						}
						done <- err
					}()
					if err := <-done; err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64((processCPU(b)-c0).Microseconds())/float64(b.N), "cpu-us/get")
			})
		}
	}
}

// BenchmarkS3DeleteBatch measures the client's CPU per multi-object
// delete request on versitygw (cpu-us/request: building, signing and
// sending it, reading the answer) of 2 keys and of 90 (about what a
// node's batch carries at 200 firing actors), the keys put beforehand
// with the timer stopped; path=lean is the client as it is, path=sdk the
// same client sending them through the SDK's DeleteObjects.
//
//	go test ./bucket -run '^$' -bench S3DeleteBatch -benchtime 300x
func BenchmarkS3DeleteBatch(b *testing.B) {
	srv := s3test.Start(b)
	sdk := srv.NewClient(b)
	s3.PutsThroughSDK(sdk)
	for _, n := range []int{2, 90} {
		for _, path := range []struct {
			name string
			c    *s3.Bucket
		}{{"sdk", sdk}, {"lean", srv.Bucket}} {
			b.Run(fmt.Sprintf("keys-%d/path=%s", n, path.name), func(b *testing.B) {
				benchDeleteBatch(b, srv.Bucket, path.c, n)
			})
		}
	}
}

func benchDeleteBatch(b *testing.B, put, c *s3.Bucket, n int) {
	ctx := context.Background()
	var cpu time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		keys := make([]string, n)
		for j := range keys {
			keys[j] = fmt.Sprintf("bench/%s/%d/%d", b.Name(), i, j)
			if _, err := put.Put(ctx, keys[j], nil, bucket.Cond{}); err != nil {
				b.Fatal(err)
			}
		}
		c0 := processCPU(b)
		b.StartTimer()
		deleted, err := c.DeleteBatch(ctx, keys)
		b.StopTimer()
		cpu += processCPU(b) - c0
		if err != nil || len(deleted) != n {
			b.Fatalf("%d of %d deleted: %v", len(deleted), n, err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/request")
}

// BenchmarkPayloadHash is what signing the payload costs a PUT over plain
// HTTP: the SHA-256 of the body, for an index entry (empty) and snapshots
// of a few KiB to 512 KiB. Over HTTPS the payload is not hashed
// (UNSIGNED-PAYLOAD).
//
//	go test ./bucket -run '^$' -bench PayloadHash
func BenchmarkPayloadHash(b *testing.B) {
	for _, size := range []int{0, 4 << 10, 32 << 10, 128 << 10, 512 << 10} {
		b.Run(fmt.Sprintf("bytes-%d", size), func(b *testing.B) {
			body := make([]byte, size)
			b.SetBytes(int64(size))
			for b.Loop() {
				sum := sha256.Sum256(body)
				_ = hex.EncodeToString(sum[:])
			}
		})
	}
}

// BenchmarkS3ServerCPU measures the S3 server's CPU per request
// (server-cpu-us/op, from its /proc stat; versitygw started by s3test)
// and the client's (client-cpu-us/op), one request at a time, for each
// kind a takeover and a firing send: the ownership record's GET (300
// bytes) and its conditional PUT (If-Match, a take's fence), a small
// actor's snapshot (24 KiB) read, written as a new hold's first upload
// (If-None-Match, a new key) and written over (If-Match, a firing's
// upload). An orphan's takeover is the two GETs and the two PUTs; a
// firing of an open actor, the overwrite (docs/benchmarks.md#drain-bound).
//
//	go test ./bucket/s3 -run '^$' -bench S3ServerCPU -benchtime 3000x
func BenchmarkS3ServerCPU(b *testing.B) {
	srv := startCPUServer(b)
	ctx := context.Background()
	c := srv.Bucket
	const record, snapshot = 300, 24 << 10
	get := func(key string, size int) func(b *testing.B) func(int) error {
		return func(b *testing.B) func(int) error {
			if _, err := c.Put(ctx, key, make([]byte, size), bucket.Cond{}); err != nil {
				b.Fatal(err)
			}
			return func(int) error {
				body, _, err := c.Get(ctx, key)
				if err == nil && len(body) != size {
					err = fmt.Errorf("read %d bytes of %d", len(body), size)
				}
				return err
			}
		}
	}
	overwrite := func(key string, size int) func(b *testing.B) func(int) error {
		return func(b *testing.B) func(int) error {
			body := make([]byte, size)
			etag, err := c.Put(ctx, key, body, bucket.Cond{})
			if err != nil {
				b.Fatal(err)
			}
			return func(i int) error {
				// Each write differs from the one before, as a fence's
				// generation or an upload's pages do.
				body[i%size]++
				etag, err = c.Put(ctx, key, body, bucket.Cond{IfMatch: etag})
				return err
			}
		}
	}
	runs := 0 // b.Run runs a kind more than once: new keys each time
	create := func(b *testing.B) func(int) error {
		runs++
		prefix := fmt.Sprintf("cpu/new/%d/", runs)
		body := make([]byte, snapshot)
		return func(i int) error {
			_, err := c.Put(ctx, prefix+strconv.Itoa(i), body, bucket.Cond{IfNoneMatch: true})
			return err
		}
	}
	runServerCPU(b, srv.Pid, []cpuKind{
		{"get-record", get("cpu/record", record)},
		{"get-snapshot", get("cpu/snapshot", snapshot)},
		{"put-record-if-match", overwrite("cpu/fence", record)},
		{"put-snapshot-if-none-match", create},
		{"put-snapshot-if-match", overwrite("cpu/upload", snapshot)},
	})
}

// BenchmarkS3ServerCPUIndex measures, as BenchmarkS3ServerCPU does, the
// S3 server's CPU and the client's for the alarm index's own requests:
// writing one entry (an empty object under a new key, as a firing that
// sets its next alarm writes), one multi-object delete of 16 entries (a
// drain's batches carry about that many) and one sweep's page (a LIST of
// 256 keys under a tenant's prefix holding 10,000 entries, a dead node's
// backlog). The keys are the index's own (alarmindex.Key). These are the
// rest of a versitygw's CPU for a drained alarm besides the snapshot's and
// the ownership record's requests (docs/benchmarks.md#takeover-requests).
//
//	go test ./bucket/s3 -run '^$' -bench S3ServerCPUIndex -benchtime 200x
func BenchmarkS3ServerCPUIndex(b *testing.B) {
	srv := startCPUServer(b)
	ctx := context.Background()
	c := srv.Bucket
	const due = int64(1_796_522_596_068)
	made := 0 // entries made so far: each is new
	entries := func(tenant string, n int) []string {
		keys := make([]string, n)
		for i := range keys {
			made++
			// 40 actors due at each millisecond, as a backlog armed
			// in a burst leaves them.
			a := abi.ActorID{Tenant: tenant, Class: "oneshot", Name: fmt.Sprintf("actor-%08d", made)}
			keys[i] = alarmindex.Key{Actor: a, DueMs: due + int64(made/40), Tag: alarmindex.Tag{Generation: 1, Nonce: strconv.FormatInt(int64(made), 16)}}.String()
		}
		return keys
	}
	put := func(b *testing.B, keys []string) {
		for _, k := range keys {
			if _, err := c.Put(ctx, k, nil, bucket.Cond{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	const page, backlog, batch = 256, 10000, 16
	var listed []string // the backlog, made once
	runServerCPU(b, srv.Pid, []cpuKind{
		{"put-index-entry", func(b *testing.B) func(int) error {
			keys := entries("put", b.N)
			return func(i int) error {
				_, err := c.Put(ctx, keys[i], nil, bucket.Cond{})
				return err
			}
		}},
		{fmt.Sprintf("delete-%d-index-entries", batch), func(b *testing.B) func(int) error {
			keys := entries("delete", b.N*batch)
			put(b, keys)
			return func(i int) error {
				deleted, err := c.DeleteBatch(ctx, keys[i*batch:(i+1)*batch])
				if err == nil && len(deleted) != batch {
					err = fmt.Errorf("deleted %d keys of %d", len(deleted), batch)
				}
				return err
			}
		}},
		{fmt.Sprintf("list-%d-of-%d-index-entries", page, backlog), func(b *testing.B) func(int) error {
			if listed == nil {
				listed = entries("list", backlog)
				put(b, listed)
			}
			prefix := alarmindex.TenantPrefix("list")
			return func(int) error {
				keys, err := c.List(ctx, prefix, "", page)
				if err == nil && (len(keys) != page || keys[0] != listed[0]) {
					err = fmt.Errorf("listed %d keys, want %d from %q", len(keys), page, listed[0])
				}
				return err
			}
		}},
	})
}

// cpuKind is one kind of request runServerCPU measures: setup, run with
// the timer stopped, makes what the kind needs and returns its request i.
type cpuKind struct {
	name  string
	setup func(b *testing.B) func(int) error
}

// runServerCPU runs each kind as a sub-benchmark of b, one request at a
// time, and reports the S3 server's CPU (process pid) and this process's
// per request.
func runServerCPU(b *testing.B, pid int, kinds []cpuKind) {
	for _, k := range kinds {
		b.Run(k.name, func(b *testing.B) {
			op := k.setup(b)
			s0, c0 := s3test.ProcessCPU(pid), processCPU(b)
			b.ResetTimer()
			for i := range b.N {
				if err := op(i); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric((s3test.ProcessCPU(pid)-s0)*1e6/float64(b.N), "server-cpu-us/op")
			b.ReportMetric(float64((processCPU(b)-c0).Microseconds())/float64(b.N), "client-cpu-us/op")
		})
	}
}

// startCPUServer starts the tests' S3 server for a benchmark that reads
// its CPU, and skips the benchmark when the server is not a local process.
func startCPUServer(b *testing.B) *s3test.Server {
	srv := s3test.Start(b)
	if srv.Pid == 0 {
		b.Skip("the S3 server is not a local process (AWS_ENDPOINT_URL): its CPU cannot be read")
	}
	return srv
}
