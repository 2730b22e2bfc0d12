package main

// The bucket probe (-outage): before the nodes start, the soak measures the
// rate at which the bucket serves a firing's requests through the nodes'
// own proxies, so that the outage's recovery is held to a bound that says
// how fast this bucket, on this machine, in this run, can be, and needs
// no machine of a given speed.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wasmkeep/alarms/bucket"
	s3bucket "github.com/wasmkeep/alarms/bucket/s3"
)

// probePrefix holds the probe's objects, outside the cluster's prefix; they
// are removed when it ends.
const probePrefix = "soak-probe/"

// probeWorkers is how many requests the probe keeps in flight: about what
// a node's deliveries send at once in a recovery.
const probeWorkers = 16

// probeResult is what the probe measured.
type probeResult struct {
	Requests int
	Ms       int64
	Errors   int
	Err      string // why the probe could not run, if so
}

func (p probeResult) rate() float64 { return perSecond(p.Requests, p.Ms) }

// probeBucket sends, for d, from probeWorkers workers spread over the
// proxies, a firing's mix of requests without its handler: the upload of
// a 4 KiB snapshot, the PUT of an empty index entry, and an ownership
// record read and written on its ETag (If-Match). It counts the requests
// answered without an error.
func (s *soak) probeBucket(ctx context.Context, name string, opts []s3bucket.Option, d time.Duration) probeResult {
	clients := make([]bucket.Bucket, len(s.slots))
	for i, sl := range s.slots {
		b, err := s3bucket.New(ctx, name, append(append([]s3bucket.Option(nil), opts...), s3bucket.WithEndpoint(sl.proxy.URL))...)
		if err != nil {
			return probeResult{Err: err.Error()}
		}
		clients[i] = b
	}
	snap := make([]byte, 4<<10)
	var done, failed atomic.Int64
	start := time.Now()
	end := start.Add(d)
	var wg sync.WaitGroup
	for w := range probeWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := clients[w%len(clients)]
			dir := fmt.Sprintf("%s%02d/", probePrefix, w)
			count := func(err error) {
				if err != nil {
					failed.Add(1)
				} else {
					done.Add(1)
				}
			}
			for i := 0; time.Now().Before(end); i++ {
				_, err := b.Put(ctx, fmt.Sprintf("%ssnap-%02d", dir, i%16), snap, bucket.Cond{})
				count(err)
				_, err = b.Put(ctx, fmt.Sprintf("%sentry-%02d", dir, i%16), nil, bucket.Cond{})
				count(err)
				_, etag, err := b.Get(ctx, dir+"record")
				if errors.Is(err, bucket.ErrNotFound) {
					err = nil // the first round: the record is created below
				}
				count(err)
				if err != nil {
					continue
				}
				cond := bucket.Cond{IfMatch: etag, IfNoneMatch: etag == ""}
				_, err = b.Put(ctx, dir+"record", []byte(fmt.Sprintf(`{"n":%d}`, i)), cond)
				count(err)
			}
		}()
	}
	wg.Wait()
	res := probeResult{Requests: int(done.Load()), Errors: int(failed.Load()), Ms: time.Since(start).Milliseconds()}
	// Clean up, directly (not counted through the proxies' summaries'
	// windows, which come later).
	if keys, err := clients[0].List(ctx, probePrefix, "", 1<<12); err == nil {
		_, _ = clients[0].DeleteBatch(ctx, keys)
	}
	return res
}
