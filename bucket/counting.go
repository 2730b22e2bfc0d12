package bucket

import (
	"context"
	"sync/atomic"
)

// Counts are the requests a Counting wrapper has seen.
type Counts struct {
	// Get, Put, Delete and List count calls of each method, failed ones
	// included; Head counts HEADs (Head on a Header bucket; through
	// bucket.Head on another, a GET counted as Get).
	Get, Put, Delete, List, Head int64
	// DeleteBatch counts multi-object delete requests (a DeleteBatch call
	// of more than MaxDeleteBatch keys sends several), BatchKeys the keys
	// they carried.
	DeleteBatch, BatchKeys int64
	// ListPages counts the LIST requests those List calls sent, as reported
	// by the wrapped bucket (see PagedLister: Mem, Counting, Prefixed and
	// the S3 client of package bucket/s3 report it; any other bucket counts
	// as one page per List call).
	ListPages int64
}

// Counting wraps a Bucket and counts the requests made through it, exactly
// and safely under concurrency. It is meant for tests that assert how many
// requests a feature makes.
type Counting struct {
	inner                          Bucket
	get, put, del, list, listPages atomic.Int64
	head                           atomic.Int64
	batch, batchKeys               atomic.Int64
}

// NewCounting returns a Counting wrapper around b.
func NewCounting(b Bucket) *Counting { return &Counting{inner: b} }

// Counts returns the counts so far.
func (c *Counting) Counts() Counts {
	return Counts{
		Get:         c.get.Load(),
		Head:        c.head.Load(),
		Put:         c.put.Load(),
		Delete:      c.del.Load(),
		List:        c.list.Load(),
		ListPages:   c.listPages.Load(),
		DeleteBatch: c.batch.Load(),
		BatchKeys:   c.batchKeys.Load(),
	}
}

// Reset sets every count to zero.
func (c *Counting) Reset() {
	c.get.Store(0)
	c.head.Store(0)
	c.put.Store(0)
	c.del.Store(0)
	c.list.Store(0)
	c.listPages.Store(0)
	c.batch.Store(0)
	c.batchKeys.Store(0)
}

// Unwrap returns the wrapped bucket.
func (c *Counting) Unwrap() Bucket { return c.inner }

// Get counts one GET and forwards the call.
func (c *Counting) Get(ctx context.Context, key string) ([]byte, string, error) {
	c.get.Add(1)
	return c.inner.Get(ctx, key)
}

// Head counts one HEAD and forwards it (as a GET to a bucket that is no
// Header, see bucket.Head).
func (c *Counting) Head(ctx context.Context, key string) (string, error) {
	if _, ok := c.inner.(Header); !ok {
		c.get.Add(1)
		return Head(ctx, c.inner, key)
	}
	c.head.Add(1)
	return Head(ctx, c.inner, key)
}

// Put counts one PUT and forwards the call.
func (c *Counting) Put(ctx context.Context, key string, body []byte, cond Cond) (string, error) {
	c.put.Add(1)
	return c.inner.Put(ctx, key, body, cond)
}

// Delete counts one DELETE and forwards the call.
func (c *Counting) Delete(ctx context.Context, key string) error {
	c.del.Add(1)
	return c.inner.Delete(ctx, key)
}

// DeleteBatch counts its requests and keys and forwards the call.
func (c *Counting) DeleteBatch(ctx context.Context, keys []string) ([]string, error) {
	c.batch.Add(int64((len(keys) + MaxDeleteBatch - 1) / MaxDeleteBatch))
	c.batchKeys.Add(int64(len(keys)))
	return c.inner.DeleteBatch(ctx, keys)
}

// List counts one LIST call and the pages it sent, and forwards the call.
func (c *Counting) List(ctx context.Context, prefix, startAfter string, limit int) ([]string, error) {
	keys, _, err := c.ListPaged(ctx, prefix, startAfter, limit)
	return keys, err
}

// ListPaged is List that also returns how many LIST requests the wrapped
// bucket sent (one if it does not say); see PagedLister.
func (c *Counting) ListPaged(ctx context.Context, prefix, startAfter string, limit int) ([]string, int, error) {
	c.list.Add(1)
	var (
		keys  []string
		pages int
		err   error
	)
	if p, ok := c.inner.(PagedLister); ok {
		keys, pages, err = p.ListPaged(ctx, prefix, startAfter, limit)
	} else {
		keys, err = c.inner.List(ctx, prefix, startAfter, limit)
		pages = 1
	}
	c.listPages.Add(int64(pages))
	return keys, pages, err
}
