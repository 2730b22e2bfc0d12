package bucket_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/bucket"
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
// the SDK's request pipeline, signing, the HTTP exchange), for an empty
// object (an index entry) and a 32 KiB one (a small actor's snapshot),
// each from a goroutine of its own, as a delivery sends it.
//
//	go test ./bucket -run '^$' -bench S3Put -benchtime 2000x
func BenchmarkS3Put(b *testing.B) {
	srv := s3test.Start(b)
	ctx := context.Background()
	for _, size := range []int{0, 32 << 10} {
		b.Run(fmt.Sprintf("bytes-%d", size), func(b *testing.B) {
			body := make([]byte, size)
			done := make(chan error)
			c0 := processCPU(b)
			b.ResetTimer()
			for i := range b.N {
				go func() {
					_, err := srv.Bucket.Put(ctx, fmt.Sprintf("bench/%d/%d", size, i), body, bucket.Cond{})
					done <- err
				}()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((processCPU(b)-c0).Microseconds())/float64(b.N), "cpu-us/put")
		})
	}
}
