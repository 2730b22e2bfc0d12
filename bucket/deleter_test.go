package bucket_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/bucket"
)

// Keys queued within the window go out in one multi-object request; a
// full batch goes at once; nothing is sent before.
func TestDeleterGathersKeysIntoBatches(t *testing.T) {
	m := bucket.NewMem()
	c := bucket.NewCounting(m)
	var keys []string
	for i := range 2050 {
		k := fmt.Sprintf("k/%05d", i)
		keys = append(keys, k)
		mustPut(t, m, k, nil, bucket.Cond{})
	}
	d := bucket.NewDeleter(c, time.Hour, nil) // only a full batch or Flush sends
	for _, k := range keys[:10] {
		d.Delete(k)
	}
	if n := c.Counts(); n.DeleteBatch != 0 || n.Delete != 0 || d.Pending() != 10 {
		t.Fatalf("queued keys were sent before the window ended: %+v, %d pending", n, d.Pending())
	}
	d.Flush(ctx(t))
	if n := c.Counts(); n.DeleteBatch != 1 || n.BatchKeys != 10 || n.Delete != 0 {
		t.Fatalf("Flush of 10 keys: %+v, want one request of 10 keys", n)
	}
	for _, k := range keys[10:] { // 2,040 keys: two full batches go at once
		d.Delete(k)
	}
	waitUntil(t, func() bool { return c.Counts().DeleteBatch == 3 })
	if d.Pending() != 40 {
		t.Fatalf("%d keys pending, want 40", d.Pending())
	}
	d.Flush(ctx(t))
	if n := c.Counts(); n.DeleteBatch != 4 || n.BatchKeys != 2050 || n.Delete != 0 {
		t.Fatalf("after 2,050 keys: %+v, want 4 requests (1,000 keys at most each) and 2,050 keys", n)
	}
	if left := m.Keys(); len(left) != 0 {
		t.Fatalf("%d keys left, want none", len(left))
	}
}

func TestDeleterSendsWhenTheWindowEnds(t *testing.T) {
	m := bucket.NewMem()
	c := bucket.NewCounting(m)
	mustPut(t, m, "a", nil, bucket.Cond{})
	mustPut(t, m, "b", nil, bucket.Cond{})
	d := bucket.NewDeleter(c, 20*time.Millisecond, nil)
	d.Delete("a")
	d.Delete("b")
	waitUntil(t, func() bool { return len(m.Keys()) == 0 })
	if n := c.Counts(); n.DeleteBatch != 1 || n.BatchKeys != 2 {
		t.Fatalf("%+v, want one request of 2 keys", n)
	}
}

// A key the store did not remove is sent again, each retry after a longer
// pause; only when the last attempt fails is it reported, and kept.
func TestDeleterReportsAFailedRequest(t *testing.T) {
	m := bucket.NewMem()
	c := bucket.NewCounting(m)
	m.Faults = func(op bucket.Op) bucket.Fault {
		if op.Kind == bucket.OpDeleteBatch {
			return bucket.Fault{Err: fmt.Errorf("injected")}
		}
		return bucket.Fault{}
	}
	var mu sync.Mutex
	var failed []string
	d := bucket.NewDeleter(c, 5*time.Millisecond, func(keys []string, err error) {
		mu.Lock()
		failed = append(failed, keys...)
		mu.Unlock()
	})
	d.SetRetries(2, 10*time.Millisecond)
	mustPut(t, m, "a", nil, bucket.Cond{})
	d.Delete("a")
	d.Flush(context.Background())
	waitUntil(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(failed) > 0 })
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(failed, []string{"a"}) || len(m.Keys()) != 1 {
		t.Fatalf("failed keys %q, bucket %q; want a reported and kept", failed, m.Keys())
	}
	if n := c.Counts(); n.DeleteBatch != 3 || d.Pending() != 0 {
		t.Fatalf("%d requests, %d pending; want the first and two retries, nothing left", n.DeleteBatch, d.Pending())
	}
}

// failFirstBatch makes m fail its first multi-object delete request.
func failFirstBatch(m *bucket.Mem) {
	var failed atomic.Bool
	m.Faults = func(op bucket.Op) bucket.Fault {
		if op.Kind == bucket.OpDeleteBatch && failed.CompareAndSwap(false, true) {
			return bucket.Fault{Err: fmt.Errorf("injected")}
		}
		return bucket.Fault{}
	}
}

// A failed request's keys go out again after the pause and are removed;
// the keys the store removed are not sent twice, and nothing is reported.
func TestDeleterRetriesWhatTheStoreDidNotRemove(t *testing.T) {
	m := bucket.NewMem()
	c := bucket.NewCounting(m)
	var mu sync.Mutex
	failFirstBatch(m)
	var failed []string
	d := bucket.NewDeleter(c, 5*time.Millisecond, func(keys []string, err error) {
		mu.Lock()
		failed = append(failed, keys...)
		mu.Unlock()
	})
	d.SetRetries(3, 20*time.Millisecond)
	for _, k := range []string{"a", "b"} {
		mustPut(t, m, k, nil, bucket.Cond{})
		d.Delete(k)
	}
	waitUntil(t, func() bool { return len(m.Keys()) == 0 })
	mustPut(t, m, "c", nil, bucket.Cond{})
	d.Delete("c")
	waitUntil(t, func() bool { return len(m.Keys()) == 0 })
	mu.Lock()
	defer mu.Unlock()
	if n := c.Counts(); n.DeleteBatch != 3 || n.BatchKeys != 5 || len(failed) != 0 {
		t.Fatalf("%+v, reported %q; want a and b twice (the retry), c once, nothing reported", n, failed)
	}
}

// Flush sends the keys paused before a retry at once.
func TestDeleterFlushSendsPausedKeys(t *testing.T) {
	m := bucket.NewMem()
	failFirstBatch(m)
	d := bucket.NewDeleter(m, time.Hour, nil)
	d.SetRetries(1, time.Hour)
	mustPut(t, m, "a", nil, bucket.Cond{})
	d.Delete("a")
	d.Flush(context.Background()) // fails: a is paused for an hour
	if d.Pending() != 1 || len(m.Keys()) != 1 {
		t.Fatalf("%d pending, bucket %q; want a paused and kept", d.Pending(), m.Keys())
	}
	d.Flush(context.Background())
	if d.Pending() != 0 || len(m.Keys()) != 0 {
		t.Fatalf("%d pending, bucket %q after Flush; want a removed", d.Pending(), m.Keys())
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// Deleters made with Sub share their root's batches: one request carries
// the keys of all of them, each under its prefix, and keys given up on are
// reported to each with its own keys, prefix cut off.
func TestDeleterSubsShareOneRequest(t *testing.T) {
	m := bucket.NewMem()
	c := bucket.NewCounting(m)
	var fail atomic.Bool
	m.Faults = func(op bucket.Op) bucket.Fault {
		if op.Kind == bucket.OpDeleteBatch && fail.Load() {
			return bucket.Fault{Err: fmt.Errorf("injected")}
		}
		return bucket.Fault{}
	}
	var mu sync.Mutex
	failed := map[string][]string{}
	onErr := func(who string) func([]string, error) {
		return func(keys []string, err error) {
			mu.Lock()
			failed[who] = append(failed[who], keys...)
			mu.Unlock()
		}
	}
	root := bucket.NewDeleter(c, time.Hour, onErr("root"))
	index := root.Sub("p/", nil).Sub("", onErr("index")) // as a plugin on a prefixed bucket
	index.SetRetries(0, 0)                               // a failed key is reported at once
	for _, k := range []string{"state/a", "p/alarms/1", "p/alarms/2"} {
		mustPut(t, m, k, nil, bucket.Cond{})
	}
	root.Delete("state/a")
	index.Delete("alarms/1")
	if root.Pending() != 2 || index.Pending() != 2 {
		t.Fatalf("pending %d and %d, want the 2 shared keys in both", root.Pending(), index.Pending())
	}
	index.Flush(ctx(t))
	if n := c.Counts(); n.DeleteBatch != 1 || n.BatchKeys != 2 || n.Delete != 0 {
		t.Fatalf("%+v, want one request carrying both keys", n)
	}
	if left := m.Keys(); !slices.Equal(left, []string{"p/alarms/2"}) {
		t.Fatalf("bucket %q, want p/alarms/2 alone left", left)
	}

	fail.Store(true)
	root.Delete("state/b")
	index.Delete("alarms/2")
	index.Delete("alarms/3")
	root.Flush(ctx(t))
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(failed["root"], []string{"state/b"}) || !slices.Equal(failed["index"], []string{"alarms/2", "alarms/3"}) {
		t.Fatalf("failures reported %q, want state/b to the root and alarms/2, alarms/3 to the sub", failed)
	}
	if left := m.Keys(); !slices.Equal(left, []string{"p/alarms/2"}) {
		t.Fatalf("bucket %q after a failed request, want p/alarms/2 kept", left)
	}
}
