package s3_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/internal/s3test"
)

// BenchmarkS3Concurrent measures the bucket's own rate (req/s) of the
// requests a take, a restore and an upload send, at the concurrency of one
// tenant's deliveries on a node (56 at once): PUTs of new keys
// If-None-Match, PUTs If-Match the last ETag, GETs and HEADs, of 16 KiB
// objects. It is the probe of the bucket beside the failover benchmark's
// drain (docs/benchmarks.md#drain):
//
//	go test ./bucket/s3 -run '^$' -bench S3Concurrent -benchtime 1x
func BenchmarkS3Concurrent(b *testing.B) {
	srv := s3test.Start(b)
	c := srv.Bucket
	ctx := context.Background()
	body := make([]byte, 16<<10)
	const workers = 56
	const n = 1000
	keys := make([]string, n)
	etags := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("probe/pre/%d", i)
		e, err := c.Put(ctx, keys[i], body, bucket.Cond{})
		if err != nil {
			b.Fatal(err)
		}
		etags[i] = e
	}
	var mu sync.Mutex
	for _, kind := range []string{"put-new-if-none-match", "put-if-match", "get", "head"} {
		b.Run(kind, func(b *testing.B) {
			var next atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			total := b.N * n
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := int(next.Add(1)) - 1
						if i >= total {
							return
						}
						k := i % n
						var err error
						switch kind {
						case "put-new-if-none-match":
							_, err = c.Put(ctx, fmt.Sprintf("probe/%s/%d", b.Name(), i), body, bucket.Cond{IfNoneMatch: true})
						case "put-if-match":
							// Key k is written again only 1,000 requests
							// later: never by two goroutines at once.
							mu.Lock()
							prev := etags[k]
							mu.Unlock()
							var etag string
							etag, err = c.Put(ctx, keys[k], body, bucket.Cond{IfMatch: prev})
							mu.Lock()
							etags[k] = etag
							mu.Unlock()
						case "get":
							_, _, err = c.Get(ctx, keys[k])
						case "head":
							_, err = bucket.Head(ctx, c, keys[k])
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(total)/time.Since(start).Seconds(), "req/s")
		})
	}
}
