package s3_test

import (
	"context"
	"fmt"
	"strings"
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

// BenchmarkS3ListAmongSiblings measures one LIST of a deep prefix, the
// shape of a delivery's LIST of an actor's entries at one time
// (alarmindex.TaggedPrefix), beside a number of sibling folders: the
// other actors with an entry due at the same millisecond, as a dead
// node's backlog due at one instant leaves them. An object store's LIST
// by prefix is an index lookup; a store that keeps keys as files and
// folders may read the whole parent folder for each one.
//
//	go test ./bucket/s3 -run '^$' -bench S3ListAmongSiblings -benchtime 20x
func BenchmarkS3ListAmongSiblings(b *testing.B) {
	srv := s3test.Start(b)
	c := srv.Bucket
	ctx := context.Background()
	have := 0
	for _, siblings := range []int{2000, 10000, 30000} {
		root := fmt.Sprintf("probe-siblings/%s/t/001796522596068/oneshot.t/", b.Name())
		var next atomic.Int64
		next.Store(int64(have))
		var wg sync.WaitGroup
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1)) - 1
					if i >= siblings {
						return
					}
					if _, err := c.Put(ctx, fmt.Sprintf("%s%08d/00000000000000000001-00", root, i), nil, bucket.Cond{}); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		have = siblings
		b.Run(fmt.Sprintf("actor-prefix/siblings-%d", siblings), func(b *testing.B) {
			for i := range b.N {
				keys, err := c.List(ctx, fmt.Sprintf("%s%08d/", root, (i*7919)%siblings), "", bucket.MaxPage)
				if err != nil || len(keys) != 1 {
					b.Fatalf("LIST: %d keys, %v", len(keys), err)
				}
			}
		})
		// The same LIST once the actor's folder is gone (its entry
		// deleted): what a delivery of a time already delivered lists.
		b.Run(fmt.Sprintf("gone-actor-prefix/siblings-%d", siblings), func(b *testing.B) {
			for i := range b.N {
				keys, err := c.List(ctx, fmt.Sprintf("%sgone%08d/", root, i), "", bucket.MaxPage)
				if err != nil || len(keys) != 0 {
					b.Fatalf("LIST: %d keys, %v", len(keys), err)
				}
			}
		})
		// A walk's page: up to 1,000 keys of the tenant's index after the
		// last key the walk read, from anywhere among the siblings.
		b.Run(fmt.Sprintf("walk-page/siblings-%d", siblings), func(b *testing.B) {
			for i := range b.N {
				at := (i * 7919) % (siblings - bucket.MaxPage + 1)
				after := fmt.Sprintf("%s%08d/00000000000000000001-00", root, at)
				keys, err := c.List(ctx, root[:strings.Index(root, "/t/")+3], after, bucket.MaxPage)
				if err != nil || len(keys) != bucket.MaxPage {
					b.Fatalf("LIST: %d keys, %v", len(keys), err)
				}
			}
		})
	}
}
