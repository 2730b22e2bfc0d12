package node_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/node"
)

// timedBucket times and counts the requests a node makes for actor state
// (snapshots under cluster/state/), apart from its lease and holds.
type timedBucket struct {
	bucket.Bucket
	mu    sync.Mutex
	time  map[string]time.Duration // by "put", "delete", "delete-batch", "get", "list"
	count map[string]int64
}

func newTimedBucket(b bucket.Bucket) *timedBucket {
	t := &timedBucket{Bucket: b}
	t.reset()
	return t
}

func (t *timedBucket) reset() {
	t.mu.Lock()
	t.time, t.count = map[string]time.Duration{}, map[string]int64{}
	t.mu.Unlock()
}

func (t *timedBucket) note(op, key string, start time.Time) {
	if !strings.HasPrefix(key, "cluster/state/") {
		op = "other-" + op
	}
	d := time.Since(start)
	t.mu.Lock()
	t.time[op] += d
	t.count[op]++
	t.mu.Unlock()
}

func (t *timedBucket) Put(ctx context.Context, key string, body []byte, cond bucket.Cond) (string, error) {
	defer t.note("put", key, time.Now())
	return t.Bucket.Put(ctx, key, body, cond)
}

func (t *timedBucket) Get(ctx context.Context, key string) ([]byte, string, error) {
	defer t.note("get", key, time.Now())
	return t.Bucket.Get(ctx, key)
}

func (t *timedBucket) Delete(ctx context.Context, key string) error {
	defer t.note("delete", key, time.Now())
	return t.Bucket.Delete(ctx, key)
}

func (t *timedBucket) DeleteBatch(ctx context.Context, keys []string) ([]string, error) {
	if len(keys) > 0 {
		defer t.note("delete-batch", keys[0], time.Now())
	}
	return t.Bucket.DeleteBatch(ctx, keys)
}

func (t *timedBucket) List(ctx context.Context, prefix, startAfter string, limit int) ([]string, error) {
	defer t.note("list", prefix, time.Now())
	return t.Bucket.List(ctx, prefix, startAfter, limit)
}

func (t *timedBucket) report(b *testing.B, events int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, op := range []string{"put", "delete", "delete-batch", "get", "list"} {
		b.ReportMetric(float64(t.count[op])/float64(events), op+"s/event")
		if t.count[op] > 0 {
			b.ReportMetric(float64(t.time[op].Microseconds())/float64(t.count[op]), "node-"+op+"-us")
		}
	}
	var other int64
	for op, n := range t.count {
		if strings.HasPrefix(op, "other-") {
			other += n
		}
	}
	b.ReportMetric(float64(other)/float64(events), "other-reqs/event")
}

// BenchmarkClusterCounter measures events per second on one cluster node
// replicating to versitygw, for the counter actor, and where the time of an
// exec-durable event goes. Each event is a "get" request (counted by the
// actor, so it writes).
//
// Metrics: events/s; per event, the bucket requests for actor state the node
// made (puts/event, deletes/event, ...) and their mean latency inside the
// node (node-put-us, ...); other-reqs/event counts lease renewals and hold
// reads in the same time. The exec-durable case also times each part alone,
// in the same run: the guest and SQLite (engine.Actor.Request on an actor
// of its own: guest-sqlite-us), Store.Snapshot (snapshot-us, of
// snapshot-bytes), and a conditional PUT of a body that size (put-us).
// event-us is the mean exec-durable event; rest-us what is left of it after
// the guest and SQLite, the snapshot and the node's state requests on the
// reply path (the alarm plugin, the sidecar file, locking); the DELETE of the
// replaced snapshot runs in the background (node-delete-us).
//
//	go test -run '^$' -bench BenchmarkClusterCounter -benchtime 3s ./node/
func BenchmarkClusterCounter(b *testing.B) {
	ctx := context.Background()
	srv := s3test.Start(b)
	tb := newTimedBucket(srv.Bucket)
	classes := counter(b)
	n := startHost(b, tb, "bench", b.TempDir(), classes, hostConfig{})
	round := 0

	b.Run("exec-durable", func(b *testing.B) {
		round++
		id := abi.ActorID{Tenant: "b", Class: "counter", Name: fmt.Sprint("durable-", round)}
		event := benchEvents(b, n, tb, node.ExecDurable, []abi.ActorID{id})
		guest, snapshot := timeParts(b, ctx, classes["counter"], srv.Bucket)
		tb.mu.Lock()
		// The DELETE of the replaced snapshot runs off the reply path.
		bucketTime := tb.time["put"] + tb.time["get"] + tb.time["list"]
		tb.mu.Unlock()
		b.ReportMetric(float64(event.Microseconds()), "event-us")
		b.ReportMetric(float64((event - guest - snapshot - bucketTime/time.Duration(b.N)).Microseconds()), "rest-us")
	})
	b.Run("exec", func(b *testing.B) {
		round++
		id := abi.ActorID{Tenant: "b", Class: "counter", Name: fmt.Sprint("exec-", round)}
		benchEvents(b, n, tb, node.Exec, []abi.ActorID{id})
	})
	b.Run("exec-durable-8-actors", func(b *testing.B) {
		round++
		var ids []abi.ActorID
		for i := 0; i < 8; i++ {
			ids = append(ids, abi.ActorID{Tenant: "b", Class: "counter", Name: fmt.Sprint("many-", round, "-", i)})
		}
		benchEvents(b, n, tb, node.ExecDurable, ids)
	})
}

// benchEvents runs b.N events spread over the actors, one client per actor,
// and reports events/s and the node's bucket requests. It returns the mean
// time of an event (with the timer stopped).
func benchEvents(b *testing.B, n *node.Node, tb *timedBucket, kind node.EventKind, ids []abi.ActorID) time.Duration {
	ctx := context.Background()
	for _, id := range ids { // take and create each actor outside the timing
		if _, err := n.Exec(ctx, id, []byte("get"), node.ExecDurable); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(ids))
	tb.reset()
	b.ResetTimer()
	start := time.Now()
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if _, err := n.Exec(ctx, id, []byte("get"), kind); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	if kind == node.Exec {
		// Count the uploads still under way: take each actor's lock once more.
		for _, id := range ids {
			if _, err := n.State(ctx, id); err != nil {
				b.Fatal(err)
			}
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
	tb.report(b, b.N)
	return elapsed / time.Duration(b.N)
}

// timeParts times, b.N times each, the parts of an exec-durable event on
// their own: the guest and SQLite, the snapshot, and the PUT. It returns the
// mean time of the first two.
func timeParts(b *testing.B, ctx context.Context, wasm []byte, bk bucket.Bucket) (guest, snapshot time.Duration) {
	eng, err := engine.NewEngine(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close(ctx)
	class, err := eng.Compile(ctx, "counter", wasm)
	if err != nil {
		b.Fatal(err)
	}
	id := abi.ActorID{Tenant: "b", Class: "counter", Name: "parts"}
	a, err := eng.Open(ctx, id, class, filepath.Join(b.TempDir(), "parts.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close(ctx)
	if _, err := a.Request(ctx, []byte("get")); err != nil { // on-init and the instance
		b.Fatal(err)
	}

	start := time.Now()
	for i := 0; i < b.N; i++ {
		if _, err := a.Request(ctx, []byte("get")); err != nil {
			b.Fatal(err)
		}
	}
	guest = time.Since(start) / time.Duration(b.N)
	b.ReportMetric(float64(guest.Nanoseconds())/1e3, "guest-sqlite-us")

	var snap []byte
	start = time.Now()
	for i := 0; i < b.N; i++ {
		if err := a.Lock(func(st *engine.Store) error {
			var err error
			snap, err = st.Snapshot()
			return err
		}); err != nil {
			b.Fatal(err)
		}
	}
	snapshot = time.Since(start) / time.Duration(b.N)
	b.ReportMetric(float64(snapshot.Nanoseconds())/1e3, "snapshot-us")
	b.ReportMetric(float64(len(snap)), "snapshot-bytes")

	prefix := fmt.Sprintf("bench/put/%d/", time.Now().UnixNano())
	start = time.Now()
	for i := 0; i < b.N; i++ {
		if _, err := bk.Put(ctx, fmt.Sprintf("%s%020d", prefix, i), snap, bucket.Cond{IfNoneMatch: true}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "put-us")
	return guest, snapshot
}
