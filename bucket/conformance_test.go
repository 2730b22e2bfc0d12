package bucket_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/internal/buckettest"
)

// emptyETag is the ETag S3 gives every empty object.
const emptyETag = `"d41d8cd98f00b204e9800998ecf8427e"`

// conformance runs the behaviour every Bucket must share, on buckets made by
// newBucket (a fresh, empty bucket per call).
func conformance(t *testing.T, newBucket func(t *testing.T) bucket.Bucket) {
	t.Run("GetMissing", func(t *testing.T) {
		b := newBucket(t)
		_, _, err := b.Get(ctx(t), "no/such/key")
		if !errors.Is(err, bucket.ErrNotFound) || errors.Is(err, bucket.ErrPrecondition) {
			t.Fatalf("Get of a missing key: err = %v, want ErrNotFound", err)
		}
		var opErr *bucket.OpError
		// The object's key in the store: a Prefixed bucket names it whole.
		if !errors.As(err, &opErr) || !strings.HasSuffix(opErr.Key, "no/such/key") || opErr.Op != bucket.OpGet {
			t.Fatalf("error %v does not name the GET and its key", err)
		}
	})

	t.Run("PutGetOverwrite", func(t *testing.T) {
		b := newBucket(t)
		etag1 := mustPut(t, b, "obj", []byte("one"), bucket.Cond{})
		body, etag, err := b.Get(ctx(t), "obj")
		if err != nil || string(body) != "one" || etag != etag1 {
			t.Fatalf("Get = %q, %q, %v; want \"one\", %q", body, etag, err, etag1)
		}
		etag2 := mustPut(t, b, "obj", []byte("two"), bucket.Cond{})
		if etag2 == etag1 {
			t.Fatalf("a different body kept ETag %q", etag1)
		}
		body, etag, err = b.Get(ctx(t), "obj")
		if err != nil || string(body) != "two" || etag != etag2 {
			t.Fatalf("Get after overwrite = %q, %q, %v; want \"two\", %q", body, etag, err, etag2)
		}
	})

	t.Run("DeleteBatch", func(t *testing.T) {
		b := newBucket(t)
		keep := []string{"batch/keep-a", "batch/keep-b"}
		var gone []string
		for i := range 1203 { // two requests: 1,000 keys and 203
			gone = append(gone, fmt.Sprintf("batch/gone/%04d", i))
		}
		for _, k := range append(slices.Clone(keep), gone[:1100]...) {
			mustPut(t, b, k, nil, bucket.Cond{})
		}
		// The last 103 keys do not exist: deleting them is no error.
		deleted, err := b.DeleteBatch(ctx(t), gone)
		if err != nil {
			t.Fatalf("DeleteBatch: %v", err)
		}
		if !slices.Equal(deleted, gone) {
			t.Fatalf("DeleteBatch reported %d keys deleted, want all %d", len(deleted), len(gone))
		}
		left, err := b.List(ctx(t), "batch/", "", 5000)
		if err != nil || !slices.Equal(left, keep) {
			t.Fatalf("after DeleteBatch the bucket holds %q, %v; want %q", left, err, keep)
		}
		if deleted, err := b.DeleteBatch(ctx(t), nil); err != nil || len(deleted) != 0 {
			t.Fatalf("DeleteBatch of nothing = %q, %v", deleted, err)
		}
	})

	t.Run("IfNoneMatch", func(t *testing.T) {
		b := newBucket(t)
		mustPut(t, b, "hold", []byte("first"), bucket.Cond{IfNoneMatch: true})
		_, err := b.Put(ctx(t), "hold", []byte("second"), bucket.Cond{IfNoneMatch: true})
		if !errors.Is(err, bucket.ErrPrecondition) {
			t.Fatalf("second PUT with If-None-Match: err = %v, want ErrPrecondition", err)
		}
		if body := mustGet(t, b, "hold"); string(body) != "first" {
			t.Fatalf("a failed conditional PUT changed the body to %q", body)
		}
	})

	t.Run("IfMatch", func(t *testing.T) {
		b := newBucket(t)
		etag1 := mustPut(t, b, "rec", []byte("v1"), bucket.Cond{})
		etag2 := mustPut(t, b, "rec", []byte("v2"), bucket.Cond{IfMatch: etag1})
		if _, err := b.Put(ctx(t), "rec", []byte("v3"), bucket.Cond{IfMatch: etag1}); !errors.Is(err, bucket.ErrPrecondition) {
			t.Fatalf("PUT with a stale If-Match: err = %v, want ErrPrecondition", err)
		}
		if body := mustGet(t, b, "rec"); string(body) != "v2" {
			t.Fatalf("body = %q after a failed If-Match, want v2", body)
		}
		mustPut(t, b, "rec", []byte("v3"), bucket.Cond{IfMatch: etag2})
		if body := mustGet(t, b, "rec"); string(body) != "v3" {
			t.Fatalf("body = %q, want v3", body)
		}
	})

	t.Run("IfMatchMissingKey", func(t *testing.T) {
		b := newBucket(t)
		_, err := b.Put(ctx(t), "gone", []byte("x"), bucket.Cond{IfMatch: `"0123456789abcdef0123456789abcdef"`})
		if !errors.Is(err, bucket.ErrPrecondition) || !errors.Is(err, bucket.ErrNotFound) {
			t.Fatalf("If-Match on a missing key: err = %v, want ErrPrecondition and ErrNotFound", err)
		}
		if _, _, err := b.Get(ctx(t), "gone"); !errors.Is(err, bucket.ErrNotFound) {
			t.Fatalf("the failed PUT created the key: Get err = %v", err)
		}
	})

	t.Run("BothConditionsRejected", func(t *testing.T) {
		b := newBucket(t)
		if _, err := b.Put(ctx(t), "k", nil, bucket.Cond{IfNoneMatch: true, IfMatch: emptyETag}); err == nil {
			t.Fatal("a PUT with both conditions succeeded")
		}
		if _, _, err := b.Get(ctx(t), "k"); !errors.Is(err, bucket.ErrNotFound) {
			t.Fatalf("the rejected PUT created the key: Get err = %v", err)
		}
	})

	t.Run("EmptyObjectsShareETag", func(t *testing.T) {
		b := newBucket(t)
		e1 := mustPut(t, b, "e/1", nil, bucket.Cond{IfNoneMatch: true})
		e2 := mustPut(t, b, "e/2", []byte{}, bucket.Cond{})
		if e1 != emptyETag || e2 != emptyETag {
			t.Fatalf("empty objects' ETags = %q, %q; want %q", e1, e2, emptyETag)
		}
		body, etag, err := b.Get(ctx(t), "e/1")
		if err != nil || len(body) != 0 || etag != emptyETag {
			t.Fatalf("Get of an empty object = %q, %q, %v", body, etag, err)
		}
		// An empty object's ETag proves only that some empty object exists.
		mustPut(t, b, "e/1", nil, bucket.Cond{IfMatch: e2})
	})

	t.Run("Delete", func(t *testing.T) {
		b := newBucket(t)
		mustPut(t, b, "d/x", []byte("x"), bucket.Cond{})
		if err := b.Delete(ctx(t), "d/x"); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if _, _, err := b.Get(ctx(t), "d/x"); !errors.Is(err, bucket.ErrNotFound) {
			t.Fatalf("Get after Delete: err = %v, want ErrNotFound", err)
		}
		if err := b.Delete(ctx(t), "d/x"); err != nil {
			t.Fatalf("Delete of a missing key: %v", err)
		}
		// The key is free for If-None-Match again.
		mustPut(t, b, "d/x", []byte("y"), bucket.Cond{IfNoneMatch: true})
	})

	t.Run("ConcurrentIfNoneMatchHasOneWinner", func(t *testing.T) {
		b := newBucket(t)
		const racers = 8
		var wg sync.WaitGroup
		errs := make([]error, racers)
		for i := range racers {
			wg.Go(func() {
				_, errs[i] = b.Put(ctx(t), "lease", fmt.Appendf(nil, "node-%d", i), bucket.Cond{IfNoneMatch: true})
			})
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("racers %d and %d both won If-None-Match", winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, bucket.ErrPrecondition):
				t.Fatalf("racer %d: err = %v, want ErrPrecondition", i, err)
			}
		}
		if winner < 0 {
			t.Fatal("no racer won")
		}
		if body := mustGet(t, b, "lease"); string(body) != fmt.Sprintf("node-%d", winner) {
			t.Fatalf("the stored body %q is not the winner's (node-%d)", body, winner)
		}
	})

	t.Run("ListOrderPrefixStartAfter", func(t *testing.T) {
		b := newBucket(t)
		// Byte order: '-' < '.' < '/' < '0'; a store walking directories
		// would put p/a/b first.
		for _, k := range []string{"p/a0", "p/a/b", "o/z", "p/b", "p/a.d", "q/x", "p/a-c"} {
			mustPut(t, b, k, nil, bucket.Cond{})
		}
		cases := []struct {
			prefix, after string
			limit         int
			want          []string
		}{
			{"p/", "", 10, []string{"p/a-c", "p/a.d", "p/a/b", "p/a0", "p/b"}},
			{"p/a", "", 10, []string{"p/a-c", "p/a.d", "p/a/b", "p/a0"}},
			{"p/", "p/a.d", 10, []string{"p/a/b", "p/a0", "p/b"}},
			{"p/", "p/a1", 10, []string{"p/b"}}, // startAfter need not exist
			{"p/", "o/zz", 10, []string{"p/a-c", "p/a.d", "p/a/b", "p/a0", "p/b"}},
			{"p/", "", 2, []string{"p/a-c", "p/a.d"}},
			{"", "", 10, []string{"o/z", "p/a-c", "p/a.d", "p/a/b", "p/a0", "p/b", "q/x"}},
			{"p/", "p/b", 10, nil},
			{"r/", "", 10, nil},
		}
		for _, c := range cases {
			got, err := b.List(ctx(t), c.prefix, c.after, c.limit)
			if err != nil {
				t.Fatalf("List(%q, %q, %d): %v", c.prefix, c.after, c.limit, err)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("List(%q, %q, %d) = %q, want %q", c.prefix, c.after, c.limit, got, c.want)
			}
		}
		if _, err := b.List(ctx(t), "p/", "", 0); err == nil {
			t.Error("List with limit 0 succeeded")
		}
	})

	t.Run("ListPages2500", func(t *testing.T) {
		c := bucket.NewCounting(newBucket(t))
		const n = 2500
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("big/%05d", i)
		}
		putAll(t, c, keys)
		mustPut(t, c, "bigger", nil, bucket.Cond{}) // after the prefix: must not show up
		if got := c.Counts(); got != (bucket.Counts{Put: n + 1}) {
			t.Fatalf("counts after the uploads = %+v, want %d PUTs only", got, n+1)
		}
		cases := []struct {
			after string
			limit int
			want  []string
			pages int64
		}{
			{"", 3000, keys, 3},                // 1,000 + 1,000 + 500 (not truncated)
			{"", 2500, keys, 3},                // 1,000 + 1,000 + 500
			{"", 2000, keys[:2000], 2},         // the limit ends the walk: no third page
			{"", 1200, keys[:1200], 2},         // 1,000 + 200
			{"", 1, keys[:1], 1},               //
			{keys[1499], 3000, keys[1500:], 1}, // one full page, not truncated
			{keys[999], 1000, keys[1000:2000], 1},
		}
		for _, tc := range cases {
			c.Reset()
			got, err := c.List(ctx(t), "big/", tc.after, tc.limit)
			if err != nil {
				t.Fatalf("List(after %q, limit %d): %v", tc.after, tc.limit, err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("List(after %q, limit %d) returned %d keys (%q...), want %d", tc.after, tc.limit, len(got), head(got), len(tc.want))
			}
			if want := (bucket.Counts{List: 1, ListPages: tc.pages}); c.Counts() != want {
				t.Errorf("List(after %q, limit %d): counts = %+v, want %+v", tc.after, tc.limit, c.Counts(), want)
			}
		}
	})

	t.Run("CountingCountsEveryCall", func(t *testing.T) {
		c := bucket.NewCounting(newBucket(t))
		mustPut(t, c, "a", []byte("1"), bucket.Cond{})
		_, _ = c.Put(ctx(t), "a", []byte("2"), bucket.Cond{IfNoneMatch: true}) // fails, still a request
		mustGet(t, c, "a")
		_, _, _ = c.Get(ctx(t), "missing")
		_ = c.Delete(ctx(t), "a")
		_ = c.Delete(ctx(t), "a")
		_ = c.Delete(ctx(t), "a")
		_, _ = c.List(ctx(t), "", "", 10)
		want := bucket.Counts{Get: 2, Put: 2, Delete: 3, List: 1, ListPages: 1}
		if got := c.Counts(); got != want {
			t.Fatalf("counts = %+v, want %+v", got, want)
		}
		c.Reset()
		if got := c.Counts(); got != (bucket.Counts{}) {
			t.Fatalf("counts after Reset = %+v", got)
		}
	})

	t.Run("Head", func(t *testing.T) {
		c := bucket.NewCounting(newBucket(t))
		etag := mustPut(t, c, "h/obj", []byte("body"), bucket.Cond{})
		if got, err := bucket.Head(ctx(t), c, "h/obj"); err != nil || got != etag {
			t.Fatalf("Head = %q, %v; want the PUT's ETag %q", got, err, etag)
		}
		_, err := bucket.Head(ctx(t), c, "h/missing")
		var opErr *bucket.OpError
		if !errors.Is(err, bucket.ErrNotFound) || !errors.As(err, &opErr) || !strings.HasSuffix(opErr.Key, "h/missing") {
			t.Fatalf("Head of a missing key: err = %v, want ErrNotFound naming the key", err)
		}
		if got := c.Counts(); got.Head != 2 || got.Get != 0 {
			t.Fatalf("counts = %+v, want 2 HEADs and no GET", got)
		}
	})

	// ListDuringOverwrite measures what the design must not depend on:
	// whether a LIST leaves out keys that exist while they are being
	// overwritten. Five keys under one prefix are overwritten in turn
	// every 100 ms while the prefix is listed in a loop, for two seconds.
	// An erasure-coded MinIO leaves a key out of some listings (its
	// listings read a subset of the drives); S3 and versitygw do not. The
	// test reports how many listings left a key out, and how many keys
	// the listings showed that were never written (versitygw lists a PUT's
	// temporary file); it fails only if a listing is out of order or a
	// request fails.
	t.Run("ListDuringOverwrite", func(t *testing.T) {
		b := newBucket(t)
		keys := []string{"ow/a", "ow/b", "ow/c", "ow/d", "ow/e"}
		for _, k := range keys {
			mustPut(t, b, k, []byte("v0"), bucket.Cond{})
		}
		stop := make(chan struct{})
		var writeErr error
		var writes int
		var wg sync.WaitGroup
		wg.Go(func() {
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for i := 1; ; i++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				for _, k := range keys {
					if _, err := b.Put(ctx(t), k, fmt.Appendf(nil, "v%d", i), bucket.Cond{}); err != nil {
						writeErr = err
						return
					}
					writes++
				}
			}
		})
		listings, omitted, phantom := 0, 0, 0
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
			got, err := b.List(ctx(t), "ow/", "", 10)
			if err != nil {
				close(stop)
				wg.Wait()
				t.Fatalf("List: %v", err)
			}
			listings++
			if !slices.IsSorted(got) {
				t.Errorf("listing out of order: %q", got)
			}
			seen := 0
			for _, k := range got {
				if slices.Contains(keys, k) {
					seen++
				} else {
					// versitygw lists the temporary file of a PUT in
					// progress (".<name>.sgwtmp.<n>"): a key that was
					// never written, which readers must skip.
					phantom++
				}
			}
			if seen < len(keys) {
				omitted++
			}
		}
		close(stop)
		wg.Wait()
		if writeErr != nil {
			t.Fatalf("overwrite: %v", writeErr)
		}
		t.Logf("%d of %d listings during %d overwrites left out a key that exists (%.2f%%), and they showed %d keys never written; nothing is decided on a listing's word alone (docs/design.md#lists)",
			omitted, listings, writes, 100*float64(omitted)/float64(max(listings, 1)), phantom)
	})

	t.Run("CheckConditional", func(t *testing.T) {
		b := newBucket(t)
		if err := bucket.CheckConditional(ctx(t), b); err != nil {
			t.Fatalf("CheckConditional: %v", err)
		}
		if keys, err := b.List(ctx(t), "", "", 10); err != nil || len(keys) != 0 {
			t.Fatalf("the probe was left behind: %q, %v", keys, err)
		}
	})
}

func ctx(t *testing.T) context.Context { return buckettest.Ctx(t) }

func mustPut(t *testing.T, b bucket.Bucket, key string, body []byte, cond bucket.Cond) string {
	t.Helper()
	return buckettest.MustPut(t, b, key, body, cond)
}

func mustGet(t *testing.T, b bucket.Bucket, key string) []byte {
	t.Helper()
	return buckettest.MustGet(t, b, key)
}

func putAll(t *testing.T, b bucket.Bucket, keys []string) {
	t.Helper()
	buckettest.PutAll(t, b, keys)
}

func head(keys []string) []string { return keys[:min(3, len(keys))] }
